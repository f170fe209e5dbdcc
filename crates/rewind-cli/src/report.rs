//! Benchmark results: one row per measured number, written as
//! `DIR/NAME.json` (`{"bench": NAME, "rows": [...]}`)
//! and as `DIR/NAME.csv` with the same rows.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::CliError;

/// One measured number.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Row {
    /// `rewind`, `persist-nolog` or `volatile`.
    pub system: String,
    /// e.g. `batch-force`, `nolog`, `dram`.
    pub config: String,
    /// The varied parameter, e.g. `K=8`.
    pub param: String,
    /// e.g. `us_per_tx`.
    pub metric: String,
    pub value: f64,
    /// e.g. `us`, `count`, `lines`, `x`.
    pub unit: String,
}

/// The JSON document.
#[derive(Serialize, Deserialize)]
pub struct Report {
    pub bench: String,
    pub rows: Vec<Row>,
}

impl Report {
    /// The value of one metric, if measured.
    pub fn value(&self, system: &str, config: &str, param: &str, metric: &str) -> Option<f64> {
        self.rows
            .iter()
            .find(|r| {
                r.system == system && r.config == config && r.param == param && r.metric == metric
            })
            .map(|r| r.value)
    }

    /// Writes `DIR/NAME.json` and `DIR/NAME.csv`; returns their paths.
    pub fn write(&self, dir: &Path) -> Result<Vec<PathBuf>, CliError> {
        std::fs::create_dir_all(dir)
            .map_err(CliError::io(format!("creating {}", dir.display())))?;
        let json = dir.join(format!("{}.json", self.bench));
        let mut text = serde_json::to_string_pretty(self)?;
        text.push('\n');
        write_file(&json, &text)?;
        let csv = dir.join(format!("{}.csv", self.bench));
        write_file(&csv, &self.csv())?;
        Ok(vec![json, csv])
    }

    fn csv(&self) -> String {
        let mut out = String::from("system,config,param,metric,value,unit\n");
        for r in &self.rows {
            // No field holds a comma or quote: names are ours, values numbers.
            let _ = writeln!(
                out,
                "{},{},{},{},{},{}",
                r.system, r.config, r.param, r.metric, r.value, r.unit
            );
        }
        out
    }
}

/// Writes `text` to `path`, saying which file failed.
pub fn write_file(path: &Path, text: &str) -> Result<(), CliError> {
    std::fs::write(path, text).map_err(CliError::io(format!("writing {}", path.display())))
}
