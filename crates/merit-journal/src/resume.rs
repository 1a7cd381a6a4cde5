//! The resumable run engine both systems drive: the log is the truth.
//!
//! A run is a list of items: the questions of one repair stream in stream order, or the tasks
//! of an interact task list. [`drive`] settles every item exactly once, in list order, either
//! without running it (a record the log already holds, replayed into the run's state; or a
//! reason to skip it) or by running it on a worker and handing the result to the caller, who
//! appends its record to the log and folds it into the state. Because the state is only ever
//! built by settling items in list order, a run killed at any point and started again over
//! the same log ends exactly where an uninterrupted one would: the logged prefix is replayed,
//! the rest runs.
//!
//! # Invariants
//! - **Settled in list order.** Items may *run* concurrently (`at_once` at a time, for work
//!   that does not read what earlier items write), but they are settled strictly in list
//!   order whatever order they finish in, so the log of a concurrent run is the log of a
//!   sequential one.
//! - **Nothing starts past an unsettled ready item.** An item that settles without running
//!   stops the window from filling until it is settled, so whatever the state learns from a
//!   replayed record is in place before any later item starts. With `at_once == 1` every item
//!   is settled before the next one is planned: strict causality.
//! - **A failure loses only unsettled work.** The first error (from planning, running or
//!   settling) ends the run once the items already running return; their results are
//!   dropped, and they run again on resume. A panic on a worker is raised again on the
//!   caller's thread.
//!
//! The engine knows nothing of files: the caller's `settle` writes the log (with
//! [`crate::jsonl::Appender`]) before it changes the state, since the state is rebuilt from
//! the log and never the reverse.

use std::collections::BTreeMap;

/// What [`drive`]'s `plan` decided for one item.
#[derive(Debug)]
pub enum Step<Ready, Work> {
    /// Settle without running: a logged record to replay, or a reason to skip the item.
    Ready(Ready),
    /// Run `work` on a worker thread.
    Run(Work),
}

/// What [`drive`] hands `settle` for one item, in list order.
#[derive(Debug)]
pub enum Settled<Ready, Done> {
    /// The item was settled without running (what `plan` returned).
    Ready(Ready),
    /// The item ran; what `work` returned.
    Ran(Done),
}

/// Settles items `0..count` in order (see the module docs). `plan(i)` runs on the caller's
/// thread when item `i` may start; `work(i, w)` runs on a scoped worker thread, at most
/// `at_once` (at least 1) at a time; `settle(i, s)` runs on the caller's thread in list order.
/// Returns the first error any of them returned.
pub fn drive<Ready, Work, Done, E>(
    count: usize,
    at_once: usize,
    mut plan: impl FnMut(usize) -> Result<Step<Ready, Work>, E>,
    work: impl Fn(usize, Work) -> Result<Done, E> + Sync,
    mut settle: impl FnMut(usize, Settled<Ready, Done>) -> Result<(), E>,
) -> Result<(), E>
where
    Work: Send,
    Done: Send,
    E: Send,
{
    let at_once = at_once.max(1);
    let work = &work;
    std::thread::scope(|scope| {
        let (sender, receiver) = std::sync::mpsc::channel::<WorkerReport<Done, E>>();
        let mut waiting: BTreeMap<usize, Settled<Ready, Done>> = BTreeMap::new();
        let (mut next_to_plan, mut next_to_settle, mut in_flight) = (0usize, 0usize, 0usize);
        // The latest item that settles without running; nothing is planned past it until it
        // is settled.
        let mut last_ready: Option<usize> = None;
        while next_to_settle < count {
            while let Some(item) = waiting.remove(&next_to_settle) {
                settle(next_to_settle, item)?;
                next_to_settle += 1;
            }
            if next_to_settle >= count {
                break;
            }
            while in_flight < at_once
                && next_to_plan < count
                && last_ready.is_none_or(|ready| ready < next_to_settle)
            {
                let index = next_to_plan;
                next_to_plan += 1;
                match plan(index)? {
                    Step::Ready(ready) => {
                        waiting.insert(index, Settled::Ready(ready));
                        last_ready = Some(index);
                    }
                    Step::Run(input) => {
                        in_flight += 1;
                        let sender = sender.clone();
                        scope.spawn(move || {
                            let result =
                                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                    work(index, input)
                                }));
                            // The receiver outlives every worker: the scope joins them before
                            // this function's locals go away.
                            let _ = sender.send((index, result));
                        });
                    }
                }
            }
            if in_flight == 0 {
                continue;
            }
            let (index, result) = receiver
                .recv()
                .expect("this loop holds a sender, so the channel cannot close under it");
            in_flight -= 1;
            let done = result.unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
            waiting.insert(index, Settled::Ran(done));
        }
        Ok(())
    })
}

/// A worker's report: its item and what `work` returned (or the panic that ended it).
type WorkerReport<Done, E> = (usize, std::thread::Result<Result<Done, E>>);

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Items 0..n where `logged` ones replay and the rest run; returns the settle order and
    /// what each settled as.
    fn settle_order(n: usize, at_once: usize, logged: &[usize]) -> Vec<(usize, String)> {
        let mut seen = Vec::new();
        drive::<usize, usize, usize, String>(
            n,
            at_once,
            |i| {
                Ok(if logged.contains(&i) {
                    Step::Ready(i)
                } else {
                    Step::Run(i)
                })
            },
            |_, i| {
                // Later items finish first, so out-of-order completion is exercised.
                std::thread::sleep(Duration::from_millis(((n - i) * 3) as u64));
                Ok(i * 10)
            },
            |i, settled| {
                seen.push(match settled {
                    Settled::Ready(r) => (i, format!("replayed {r}")),
                    Settled::Ran(d) => (i, format!("ran {d}")),
                });
                Ok(())
            },
        )
        .unwrap();
        seen
    }

    #[test]
    fn items_settle_in_list_order_whatever_order_they_finish_in() {
        for at_once in [1, 2, 4] {
            let seen = settle_order(6, at_once, &[0, 3]);
            let expected: Vec<(usize, String)> = (0..6)
                .map(|i| {
                    let what = if i == 0 || i == 3 {
                        format!("replayed {i}")
                    } else {
                        format!("ran {}", i * 10)
                    };
                    (i, what)
                })
                .collect();
            assert_eq!(seen, expected, "at_once {at_once}");
        }
    }

    #[test]
    fn one_at_a_time_settles_each_item_before_the_next_is_planned() {
        let settled = AtomicUsize::new(0);
        drive::<(), (), (), String>(
            5,
            1,
            |i| {
                assert_eq!(settled.load(Ordering::SeqCst), i, "item {i} planned early");
                Ok(Step::Run(()))
            },
            |_, ()| Ok(()),
            |_, _| {
                settled.fetch_add(1, Ordering::SeqCst);
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(settled.load(Ordering::SeqCst), 5);
    }

    #[test]
    fn a_ready_item_is_settled_before_any_later_item_starts() {
        let settled = AtomicUsize::new(0);
        drive::<(), (), (), String>(
            6,
            4,
            |i| {
                if i > 2 {
                    assert!(settled.load(Ordering::SeqCst) > 2, "item {i} started early");
                }
                Ok(if i == 2 {
                    Step::Ready(())
                } else {
                    Step::Run(())
                })
            },
            |_, ()| Ok(()),
            |_, _| {
                settled.fetch_add(1, Ordering::SeqCst);
                Ok(())
            },
        )
        .unwrap();
    }

    #[test]
    fn the_first_error_stops_the_run_and_later_items_are_not_settled() {
        let mut seen = Vec::new();
        let error = drive::<(), usize, usize, String>(
            8,
            2,
            |i| Ok(Step::Run(i)),
            |_, i| {
                if i == 3 {
                    Err(format!("item {i} failed"))
                } else {
                    Ok(i)
                }
            },
            |i, _| {
                seen.push(i);
                Ok(())
            },
        )
        .unwrap_err();
        assert_eq!(error, "item 3 failed");
        // Which of the items before it were settled depends on thread timing; never one after.
        assert!(seen.len() <= 3, "{seen:?}");
        assert!(seen.iter().enumerate().all(|(k, &i)| k == i), "{seen:?}");
    }

    #[test]
    fn a_worker_panic_is_raised_on_the_caller() {
        let caught = std::panic::catch_unwind(|| {
            drive::<(), (), (), String>(
                2,
                2,
                |_| Ok(Step::Run(())),
                |i, ()| {
                    assert!(i != 1, "worker {i} panicked");
                    Ok(())
                },
                |_, _| Ok(()),
            )
        });
        assert!(caught.is_err());
    }

    #[test]
    fn nothing_to_do_is_fine() {
        drive::<(), (), (), String>(
            0,
            3,
            |_| unreachable!(),
            |_, ()| unreachable!(),
            |_, _| unreachable!(),
        )
        .unwrap();
    }
}
