//! A turnstile that runs the two threads of a two-thread program one at a
//! time, switching between them by a seeded schedule, so that a program's
//! interleaving (and so its crash points) is the same on every run.
//!
//! Exactly one thread holds the turn; the other waits in the turnstile. The
//! holder reaches a scheduling point before each store, flush and fence of
//! the pool's domain (before the simulator's lock, see
//! `Domain::set_schedule`) and between operations and transactions; there
//! the schedule may pass the turn. It never passes while the holder keeps
//! one of the engine's latches: the waiting thread could block on it, and
//! the holder would wait for its turn forever. The waiting thread holds no
//! latch (it gave the turn up where it held none), so the holder never
//! blocks on one either.

use std::sync::{Condvar, Mutex, MutexGuard};

use super::program::Rng;

/// The shared turn of two threads, `0` and `1`.
pub(crate) struct Turnstile {
    state: Mutex<State>,
    turn: Condvar,
}

struct State {
    /// Who may run.
    owner: usize,
    /// Threads that have left (finished or failed).
    done: [bool; 2],
    /// Transactions each thread has finished (returned from).
    returned: [usize; 2],
    rng: Rng,
    /// A free scheduling point passes the turn with probability 1 / this.
    one_in: u64,
}

impl Turnstile {
    /// Thread `first` runs first; at each free point the turn passes with
    /// probability `1 / one_in`, drawn from `seed`.
    pub(crate) fn new(seed: u64, first: usize, one_in: u64) -> Turnstile {
        Turnstile {
            state: Mutex::new(State {
                owner: first,
                done: [false; 2],
                returned: [0; 2],
                rng: Rng::new(seed),
                one_in: one_in.max(1),
            }),
            turn: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until `t` holds the turn.
    fn wait<'a>(&'a self, mut g: MutexGuard<'a, State>, t: usize) -> MutexGuard<'a, State> {
        while g.owner != t {
            g = self.turn.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        g
    }

    fn pass(&self, g: &mut State, t: usize) {
        g.owner = 1 - t;
        self.turn.notify_all();
    }

    /// Thread `t` starts: it waits for its turn.
    pub(crate) fn enter(&self, t: usize) {
        let g = self.lock();
        drop(self.wait(g, t));
    }

    /// A scheduling point of thread `t`, which holds the turn; `latched`:
    /// it holds an engine latch, so the turn must stay.
    pub(crate) fn point(&self, t: usize, latched: bool) {
        let mut g = self.lock();
        if g.owner != t || latched || g.done[1 - t] {
            return;
        }
        let n = g.one_in;
        if g.rng.below(n) == 0 {
            self.pass(&mut g, t);
            drop(self.wait(g, t));
        }
    }

    /// Thread `t` (holding the turn, no latch) waits until the other thread
    /// has returned from `n` transactions or left.
    pub(crate) fn wait_for(&self, t: usize, n: usize) {
        let mut g = self.lock();
        while g.returned[1 - t] < n && !g.done[1 - t] {
            self.pass(&mut g, t);
            g = self.wait(g, t);
        }
    }

    /// Thread `t` returned from a transaction.
    pub(crate) fn returned(&self, t: usize) {
        self.lock().returned[t] += 1;
    }

    /// Thread `t` is finished: the other runs alone from now on.
    pub(crate) fn leave(&self, t: usize) {
        let mut g = self.lock();
        g.done[t] = true;
        if g.owner == t {
            self.pass(&mut g, t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Two threads log their steps; the order depends only on the seed.
    fn trace(seed: u64) -> Vec<(usize, usize)> {
        let ts = Turnstile::new(seed, 0, 3);
        let log = Mutex::new(Vec::new());
        let running = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for t in 0..2 {
                let (ts, log, running) = (&ts, &log, &running);
                s.spawn(move || {
                    ts.enter(t);
                    for i in 0..50 {
                        // Never two threads between points at once.
                        assert_eq!(running.fetch_add(1, Ordering::SeqCst), 0);
                        log.lock().unwrap().push((t, i));
                        running.fetch_sub(1, Ordering::SeqCst);
                        ts.point(t, false);
                    }
                    ts.leave(t);
                });
            }
        });
        log.into_inner().unwrap()
    }

    #[test]
    fn the_interleaving_is_a_function_of_the_seed() {
        let a = trace(5);
        assert_eq!(a, trace(5));
        assert_ne!(a, trace(6));
        assert!(a.windows(2).any(|w| w[0].0 != w[1].0), "threads alternate");
    }

    #[test]
    fn wait_for_orders_a_step_after_the_other_threads() {
        let ts = Turnstile::new(1, 1, 2);
        let log = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for t in 0..2 {
                let (ts, log) = (&ts, &log);
                s.spawn(move || {
                    ts.enter(t);
                    if t == 1 {
                        ts.wait_for(1, 3);
                    }
                    for i in 0..3 {
                        log.lock().unwrap().push((t, i));
                        ts.returned(t);
                        ts.point(t, false);
                    }
                    ts.leave(t);
                });
            }
        });
        let log = log.into_inner().unwrap();
        let first1 = log.iter().position(|e| e.0 == 1).unwrap();
        assert_eq!(log[..first1].len(), 3, "{log:?}");
    }
}
