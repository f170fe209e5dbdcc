//! What the bench tests share: finding a row of a bench's JSON results.

// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use serde_json::Value;

/// The row whose fields have the given values (fields not named may be
/// anything).
pub fn find<'a>(rows: &'a [Value], fields: &[(&str, &str)]) -> Option<&'a Value> {
    rows.iter()
        .find(|r| fields.iter().all(|&(field, want)| r[field] == want))
}

/// The value of the row of `system`/`config` at `param` for `metric`.
pub fn value(rows: &[Value], system: &str, config: &str, param: &str, metric: &str) -> Option<f64> {
    row(rows, system, config, param, metric).and_then(|r| r["value"].as_f64())
}

/// The row of `system`/`config` at `param` for `metric`.
pub fn row<'a>(
    rows: &'a [Value],
    system: &str,
    config: &str,
    param: &str,
    metric: &str,
) -> Option<&'a Value> {
    find(
        rows,
        &[
            ("system", system),
            ("config", config),
            ("param", param),
            ("metric", metric),
        ],
    )
}
