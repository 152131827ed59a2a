//! Comparing task wakers, for code that keeps a waker and replaces it only when it changes.

use std::task::Waker;

/// Whether `a` and `b` wake the same task: [`Waker::will_wake`], or the same data and the same
/// functions behind different vtable addresses.
///
/// `will_wake` compares the vtables' addresses, and a waker's clone may carry a copy of its
/// vtable at another address (tokio's `block_on` waker does in a release build: a clone never
/// `will_wake` the original). Code that keeps a waker to skip re-registering it (the loop's
/// event relay and cancellation race, the HTTP driver's idle timer) would then clone and
/// re-register it at every poll all the same (issue 16).
#[must_use]
pub fn same_waker(a: &Waker, b: &Waker) -> bool {
    a.will_wake(b) || (a.data() == b.data() && a.vtable() == b.vtable())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::task::Wake;

    use super::*;

    struct Task;

    impl Wake for Task {
        fn wake(self: Arc<Self>) {}
    }

    // A vtable copied to another address needs `unsafe` to build (forbidden here): the loop's
    // `a_clone_of_the_block_on_waker_is_the_same_waker` checks that case with tokio's waker.
    #[test]
    fn a_clone_is_the_same_waker_and_another_task_is_not() {
        let task = Waker::from(Arc::new(Task));
        assert!(same_waker(&task, &task.clone()));
        assert!(!same_waker(&task, &Waker::from(Arc::new(Task))));
        assert!(!same_waker(&task, Waker::noop()));
    }
}
