//! Ordering of hierarchical cpuset writes.
//!
//! Control law (v1 enforces it on every single write; v2 does not, but the
//! same order never hurts): a group's `cpuset.cpus` (and `cpuset.mems`) must
//! stay inside its parent's, so
//!
//! - **widen parent before child**: a child may only gain CPUs its parent
//!   already has;
//! - **narrow child before parent**: a parent may only drop CPUs no child
//!   still holds.
//!
//! A batch of changes that mixes both (a parent moving from `0-1` to `2-3`
//! while its child moves from `0` to `3`) is written in two phases:
//!
//! 1. top-down (shallowest group first), every group that gains something
//!    is widened to `current ∪ desired`;
//! 2. bottom-up (deepest first), every group not yet at its desired value
//!    is narrowed to it.
//!
//! Each intermediate state is valid when the initial and the final states
//! are: in phase 1 a child gets `old_c ∪ new_c ⊆ old_p ∪ new_p`, which its
//! parent already holds; in phase 2 a child shrinks inside a parent that
//! still holds `old_p ∪ new_p ⊇ new_c`, and a parent shrinks to `new_p`
//! only after its children reached `new_c ⊆ new_p`. A pure widening is
//! therefore one top-down pass and a pure narrowing one bottom-up pass.

/// One cpuset change: the group's depth, its current and desired lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Change {
    pub depth: usize,
    pub current: Vec<u32>,
    pub desired: Vec<u32>,
}

/// The writes, as (index into `changes`, list to write), in order.
pub(crate) fn order(changes: &[Change]) -> Vec<(usize, Vec<u32>)> {
    let mut steps = Vec::new();
    let mut after_phase1: Vec<Vec<u32>> = changes.iter().map(|c| c.current.clone()).collect();
    let mut by_depth: Vec<usize> = (0..changes.len()).collect();
    by_depth.sort_by_key(|&i| changes[i].depth);
    for &i in &by_depth {
        let c = &changes[i];
        if !is_subset(&c.desired, &c.current) {
            let u = union(&c.current, &c.desired);
            steps.push((i, u.clone()));
            after_phase1[i] = u;
        }
    }
    for &i in by_depth.iter().rev() {
        if after_phase1[i] != changes[i].desired {
            steps.push((i, changes[i].desired.clone()));
        }
    }
    steps
}

/// Whether sorted `a` ⊆ sorted `b`.
pub(crate) fn is_subset(a: &[u32], b: &[u32]) -> bool {
    a.iter().all(|x| b.binary_search(x).is_ok())
}

/// Elements of sorted `a` not in sorted `b`.
pub(crate) fn minus(a: &[u32], b: &[u32]) -> Vec<u32> {
    a.iter()
        .copied()
        .filter(|x| b.binary_search(x).is_err())
        .collect()
}

fn union(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut u: Vec<u32> = a.iter().chain(b).copied().collect();
    u.sort_unstable();
    u.dedup();
    u
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ch(depth: usize, current: &[u32], desired: &[u32]) -> Change {
        Change {
            depth,
            current: current.to_vec(),
            desired: desired.to_vec(),
        }
    }

    #[test]
    fn widen_is_top_down_and_narrow_is_bottom_up() {
        // Given child first, parent second: widening writes the parent first.
        let w = order(&[ch(2, &[0], &[0, 1, 2]), ch(1, &[0, 1], &[0, 1, 2, 3])]);
        assert_eq!(w, [(1, vec![0, 1, 2, 3]), (0, vec![0, 1, 2])]);
        // Given parent first: narrowing writes the child first.
        let n = order(&[ch(1, &[0, 1, 2, 3], &[0, 1]), ch(2, &[0, 1, 2], &[1])]);
        assert_eq!(n, [(1, vec![1]), (0, vec![0, 1])]);
    }

    #[test]
    fn a_move_goes_through_the_union() {
        // Parent 0-1 → 2-3, child 0 → 3.
        let s = order(&[ch(1, &[0, 1], &[2, 3]), ch(2, &[0], &[3])]);
        assert_eq!(
            s,
            [
                (0, vec![0, 1, 2, 3]),
                (1, vec![0, 3]),
                (1, vec![3]),
                (0, vec![2, 3]),
            ]
        );
        // Check the invariant child ⊆ parent after every step.
        let (mut p, mut c) = (vec![0, 1], vec![0]);
        for (i, v) in s {
            if i == 0 {
                p = v
            } else {
                c = v
            }
            assert!(is_subset(&c, &p), "child {c:?} parent {p:?}");
        }
    }

    #[test]
    fn set_helpers() {
        assert!(is_subset(&[1, 3], &[0, 1, 2, 3]));
        assert!(!is_subset(&[1, 4], &[0, 1, 2, 3]));
        assert_eq!(minus(&[0, 1, 5, 7], &[0, 1]), [5, 7]);
    }
}
