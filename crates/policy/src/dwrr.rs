//! PerfIso's **deficit-weighted round robin** over a batch I/O budget
//! (PerfIso, ATC'18, §4.2 "I/O throttling"; Pisces' DWRR).
//!
//! The batch groups share one budget `B` of a device — bytes/s or I/O
//! operations/s of one direction — in proportion to their weights `w_i`.
//! Every period the controller measures what each group used (`u_i`,
//! its I/O in the period, from the cgroup counters) and computes the
//! allowance it may use in the next one, written as the group's `io.max`:
//!
//! ```text
//! backlogged_i = u_i ≥ 0.9 · a_i                (it used its allowance: it may want more)
//! demand_i     = ∞                              if backlogged_i
//!              = max(1.25 · u_i, floor_i)       otherwise (room to grow)
//! floor_i      = 5 % of B · w_i / Σ w           (an idle group can start)
//!
//! share        = water-fill B over the groups by weight, capped by demand:
//!                each group gets B_left · w_i / Σ_left w; a group whose demand
//!                is below that gets its demand, and the rest is shared again
//!                by the others — so B goes to the groups that want it,
//!                in proportion to their weights (weighted max-min fairness);
//!                what no demand takes (no group backlogged) is shared by
//!                weight among all, so Σ share = B: a group the device
//!                serves below its allowance keeps its weighted share
//!                instead of shrinking towards what it got.
//!
//! deficit_i   ← clamp(deficit_i + s_i − u_i, 0, q_i)   if backlogged_i (q_i = B · w_i / Σ w,
//!                                                       s_i its share of the period that ends)
//!             ← 0                                       otherwise
//!                (the round robin's deficit counter: a group that wanted more
//!                 but used less than its share — the device served the
//!                 others first — is owed the difference, at most one quantum,
//!                 and what it gets beyond its share pays it back; a group that
//!                 did not want its share banks nothing)
//! a_i'        = share_i + deficit_i − Σ deficit · share_i / Σ share
//!                (what is owed is paid out of every share in proportion,
//!                 so Σ a' = Σ share ≤ B)
//! a_i'        = max(a_i', floor_i)
//! ```
//!
//! So groups competing for the device get `B · w_i / Σ w` each over time,
//! a group that does not need its share leaves it to the others, and the
//! sum of the allowances stays within the budget (plus the floors of idle
//! groups). Pure: the daemon drives it (`crates/daemon/src/isolation/io.rs`).

use serde::{Deserialize, Serialize};

/// One group's state between periods (per budget dimension).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DwrrGroup {
    /// Its weight (1..=10000).
    pub weight: u32,
    /// Its allowance for the current period, units per period (`None`
    /// before the first division: every group counts as backlogged).
    pub allowance: Option<f64>,
    /// Its fair share for the current period (the allowance before the
    /// deficit is settled).
    pub share: f64,
    /// What it is owed, units per period.
    pub deficit: f64,
}

impl DwrrGroup {
    /// A new group of weight `weight`.
    pub fn new(weight: u32) -> DwrrGroup {
        DwrrGroup {
            weight: weight.max(1),
            allowance: None,
            share: 0.0,
            deficit: 0.0,
        }
    }
}

/// Share of a group's weighted part of the budget it always gets.
pub const FLOOR_FRACTION: f64 = 0.05;
/// A group that used this share of its allowance is backlogged.
pub const BACKLOG_FRACTION: f64 = 0.9;
/// Headroom of a group that is not backlogged over what it used.
pub const GROWTH: f64 = 1.25;

/// Divides `budget` (units per period) among `groups`, given what each
/// used in the period that ends (`used[i]`, units): updates each group's
/// deficit and allowance and returns the new allowances.
pub fn divide(budget: f64, groups: &mut [DwrrGroup], used: &[f64]) -> Vec<f64> {
    assert_eq!(groups.len(), used.len());
    let n = groups.len();
    if n == 0 {
        return Vec::new();
    }
    let wsum: f64 = groups.iter().map(|g| f64::from(g.weight)).sum();
    let quantum = |g: &DwrrGroup| budget * f64::from(g.weight) / wsum;
    let floor = |g: &DwrrGroup| quantum(g) * FLOOR_FRACTION;
    let backlogged: Vec<bool> = groups
        .iter()
        .zip(used)
        .map(|(g, &u)| g.allowance.is_none_or(|a| u >= BACKLOG_FRACTION * a))
        .collect();
    let demand: Vec<f64> = (0..n)
        .map(|i| {
            if backlogged[i] {
                f64::INFINITY
            } else {
                (GROWTH * used[i]).max(floor(&groups[i]))
            }
        })
        .collect();
    let mut share = water_fill(budget, groups, &demand);
    let left = budget - share.iter().sum::<f64>();
    if left > 0.0 {
        for (i, g) in groups.iter().enumerate() {
            share[i] += left * f64::from(g.weight) / wsum;
        }
    }
    for i in 0..n {
        let g = &mut groups[i];
        g.deficit = match (backlogged[i], g.allowance) {
            (true, Some(_)) => (g.deficit + g.share - used[i]).clamp(0.0, quantum(g)),
            _ => 0.0,
        };
        g.share = share[i];
    }
    let owed: f64 = groups.iter().map(|g| g.deficit).sum();
    let total: f64 = share.iter().sum();
    (0..n)
        .map(|i| {
            let pay = if total > 0.0 {
                owed * share[i] / total
            } else {
                0.0
            };
            let a = (share[i] + groups[i].deficit - pay).max(floor(&groups[i]));
            groups[i].allowance = Some(a);
            a
        })
        .collect()
}

/// Weighted max-min fair division of `budget` capped by `demand`.
fn water_fill(budget: f64, groups: &[DwrrGroup], demand: &[f64]) -> Vec<f64> {
    let n = groups.len();
    let mut out = vec![0.0; n];
    let mut open: Vec<usize> = (0..n).collect();
    let mut left = budget;
    while !open.is_empty() && left > 0.0 {
        let w: f64 = open.iter().map(|&i| f64::from(groups[i].weight)).sum();
        let capped: Vec<usize> = open
            .iter()
            .copied()
            .filter(|&i| demand[i] <= left * f64::from(groups[i].weight) / w)
            .collect();
        if capped.is_empty() {
            for &i in &open {
                out[i] = left * f64::from(groups[i].weight) / w;
            }
            break;
        }
        for &i in &capped {
            out[i] = demand[i];
            left -= demand[i];
        }
        open.retain(|i| !capped.contains(i));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(budget: f64, weights: &[u32], periods: &[&[f64]]) -> (Vec<DwrrGroup>, Vec<f64>) {
        let mut g: Vec<DwrrGroup> = weights.iter().map(|&w| DwrrGroup::new(w)).collect();
        let mut a = Vec::new();
        for u in periods {
            a = divide(budget, &mut g, u);
        }
        (g, a)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6 * b.abs().max(1.0)
    }

    #[test]
    fn competing_groups_share_by_weight() {
        // both use everything they are allowed, period after period
        let mut g = vec![DwrrGroup::new(200), DwrrGroup::new(100)];
        let mut a = divide(300.0, &mut g, &[0.0, 0.0]);
        for _ in 0..5 {
            let used = a.clone();
            a = divide(300.0, &mut g, &used);
        }
        assert!(close(a[0], 200.0) && close(a[1], 100.0), "{a:?}");
        assert!(a.iter().sum::<f64>() <= 300.0 + 1e-9);
    }

    #[test]
    fn an_idle_group_leaves_its_share_but_keeps_a_floor() {
        let (_, a) = run(1000.0, &[100, 100], &[&[0.0, 0.0], &[0.0, 500.0]]);
        // group 0 used nothing: its floor (5 % of 500); group 1 the rest
        assert!(close(a[0], 25.0), "{a:?}");
        assert!(close(a[1], 975.0), "{a:?}");
    }

    #[test]
    fn what_no_one_demands_is_shared_by_weight() {
        // both used half their allowance (a slow device): the budget is not
        // shrunk towards what they got, the weighted shares stay
        let mut g = vec![DwrrGroup::new(300), DwrrGroup::new(100)];
        let a = divide(1600.0, &mut g, &[0.0, 0.0]);
        assert!(close(a[0], 1200.0) && close(a[1], 400.0), "{a:?}");
        for _ in 0..5 {
            let a = divide(1600.0, &mut g, &[600.0, 200.0]);
            assert!(close(a[0], 1200.0) && close(a[1], 400.0), "{a:?}");
        }
    }

    #[test]
    fn a_light_group_gets_room_to_grow_and_the_heavy_one_the_rest() {
        let (_, a) = run(1000.0, &[100, 100], &[&[0.0, 0.0], &[100.0, 500.0]]);
        assert!(close(a[0], 125.0), "{a:?}");
        assert!(close(a[1], 875.0), "{a:?}");
    }

    #[test]
    fn a_backlogged_group_that_got_less_is_owed_the_difference() {
        // equal weights, both backlogged; group 0 got 92 % of its 500
        let mut g = vec![DwrrGroup::new(100), DwrrGroup::new(100)];
        divide(1000.0, &mut g, &[0.0, 0.0]);
        let a = divide(1000.0, &mut g, &[460.0, 500.0]);
        assert!(close(g[0].deficit, 40.0), "{g:?}");
        assert!(a[0] > 500.0 && a[1] < 500.0, "{a:?}");
        assert!(close(a[0] + a[1], 1000.0), "the budget is kept: {a:?}");
        // paid back: each used its allowance; over the two periods both
        // got the same, and the next allowances are equal again
        let used = a.clone();
        let got: Vec<f64> = vec![460.0 + used[0], 500.0 + used[1]];
        assert!(close(got[0], got[1]), "{got:?}");
        let a = divide(1000.0, &mut g, &used);
        assert!(close(a[0], 500.0) && close(a[1], 500.0), "{a:?} {g:?}");
    }

    #[test]
    fn a_deficit_is_at_most_one_quantum_and_never_banked_when_idle() {
        let mut g = vec![DwrrGroup::new(100), DwrrGroup::new(100)];
        divide(1000.0, &mut g, &[0.0, 0.0]);
        // backlogged by the first-period rule, then used nothing
        divide(1000.0, &mut g, &[0.0, 500.0]);
        assert_eq!(
            g[0].deficit, 0.0,
            "a group that did not use its allowance banks nothing"
        );
        g[1].deficit = 1e9;
        g[1].share = 1e9;
        g[1].allowance = Some(1e9);
        divide(1000.0, &mut g, &[10.0, 1e9]);
        assert!(g[1].deficit <= 500.0 + 1e-9, "{g:?}");
    }

    #[test]
    fn first_period_every_group_gets_its_weighted_share() {
        let (_, a) = run(90.0, &[1, 2], &[&[0.0, 0.0]]);
        assert!(close(a[0], 30.0) && close(a[1], 60.0), "{a:?}");
        assert!(divide(10.0, &mut [], &[]).is_empty());
    }
}
