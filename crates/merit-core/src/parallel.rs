//! Work fanned out to one scoped thread per item, results in the items' order.
//!
//! The repair experiment asks a batched model for several initial predictions at once, and
//! the streams benchmark runs several episodes at once the same way; both need the answers in
//! input order whatever order the threads finish in (so files and reports never depend on
//! timing). Rayon's pool would cap concurrency at the core count, which defeats the point of
//! keeping more conversations in flight than cores for a batching model, hence plain threads.

/// Runs `work` on every item at once, one scoped thread each, and returns the results in the
/// items' order; `None` where that item's thread panicked.
pub fn all_at_once<T: Sync, R: Send>(items: &[T], work: impl Fn(&T) -> R + Sync) -> Vec<Option<R>> {
    std::thread::scope(|scope| {
        let work = &work;
        let handles: Vec<_> = items
            .iter()
            .map(|item| scope.spawn(move || work(item)))
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().ok())
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_the_items_order_and_a_panic_is_none() {
        let items = [30u64, 0, 10];
        let results = all_at_once(&items, |&ms| {
            std::thread::sleep(std::time::Duration::from_millis(ms));
            ms * 2
        });
        assert_eq!(results, [Some(60), Some(0), Some(20)]);
        let results = all_at_once(&[1, 2], |&i| {
            assert!(i != 2, "the second item fails");
            i
        });
        assert_eq!(results, [Some(1), None]);
    }
}
