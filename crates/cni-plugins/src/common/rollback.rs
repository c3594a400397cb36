//! The one shape of "take back what a failed ADD did" for a plugin that makes several
//! changes: what was done so far lives in a value that knows how to undo it ([`Undo`]),
//! held by a [`Rollback`] guard that undoes it when dropped (an early return with `?`, a
//! panic) unless [`Rollback::keep`] was called once everything succeeded. Guards of one
//! resource that hand it back on success (the host end of a veth pair, a container link)
//! keep their own `keep()` returning it.

use std::ops::{Deref, DerefMut};

/// Changes made so far, and how to take them back.
pub trait Undo {
    /// Takes back every change recorded, the last first; failures are reported, not returned
    /// (the ADD's own error is what the runtime sees).
    fn undo(&mut self);
}

/// Undoes the changes it holds when dropped, unless kept.
pub struct Rollback<U: Undo> {
    changes: Option<U>,
}

impl<U: Undo> Rollback<U> {
    pub fn new(changes: U) -> Rollback<U> {
        Rollback { changes: Some(changes) }
    }

    /// Everything succeeded: nothing is undone.
    pub fn keep(mut self) {
        self.changes = None;
    }
}

impl<U: Undo> Deref for Rollback<U> {
    type Target = U;
    fn deref(&self) -> &U {
        self.changes.as_ref().expect("changes are held until kept")
    }
}

impl<U: Undo> DerefMut for Rollback<U> {
    fn deref_mut(&mut self) -> &mut U {
        self.changes.as_mut().expect("changes are held until kept")
    }
}

impl<U: Undo> Drop for Rollback<U> {
    fn drop(&mut self) {
        if let Some(changes) = self.changes.as_mut() {
            changes.undo();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    struct Log<'a>(&'a RefCell<Vec<u32>>, Vec<u32>);

    impl Undo for Log<'_> {
        fn undo(&mut self) {
            while let Some(step) = self.1.pop() {
                self.0.borrow_mut().push(step);
            }
        }
    }

    #[test]
    fn dropped_it_undoes_the_last_first_and_kept_it_undoes_nothing() {
        let undone = RefCell::new(vec![]);
        {
            let mut rollback = Rollback::new(Log(&undone, vec![]));
            rollback.1.extend([1, 2, 3]);
        }
        assert_eq!(*undone.borrow(), [3, 2, 1]);
        undone.borrow_mut().clear();
        let mut rollback = Rollback::new(Log(&undone, vec![]));
        rollback.1.push(4);
        rollback.keep();
        assert!(undone.borrow().is_empty());
    }
}
