//! **Study**: the questions asked of a result file — its loads, series and
//! points, ratios to LC alone (paired by round, or of medians), the knee of
//! LC alone's p99 curve, the SLO, and verdicts — answered once, here, for
//! `elfen report`, `elfen bench`'s closing lines and `elfen sim validate`
//! alike. Nothing here formats text or draws; formatting reads this.
//!
//! Ratios follow resctl-bench: `p99 / base` against LC alone at the same
//! load. The **ratio of medians** divides medians over invocations. Files
//! measured with common random numbers (every configuration's invocation
//! of a round sends the same arrivals and requests) also have the **paired
//! ratio**: per round, `p99 / LC alone's p99 in the same round`, summarized
//! by its median and spread — the draw and the host's slow drift cancel
//! within a pair, so it is far less noisy.

use crate::{Config, Distribution, Point, Rep, ResultFile, Source, Stat};

pub mod conclusion;
pub mod pooled;

/// The loads of a file, ascending.
pub fn loads(f: &ResultFile) -> Vec<f64> {
    let mut v: Vec<f64> = f.points.iter().map(|p| p.rps_target).collect();
    v.sort_by(f64::total_cmp);
    v.dedup();
    v
}

/// A series: one configuration (with its label) and batch program.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SeriesKey {
    /// The configuration.
    pub config: Config,
    /// Its label, if the file gives one.
    pub label: Option<String>,
    /// The batch program (`None` for LC alone).
    pub batch: Option<String>,
}

impl SeriesKey {
    /// The key of `p`.
    pub fn of(p: &Point) -> SeriesKey {
        SeriesKey {
            config: p.config,
            label: p.label.clone(),
            batch: p.batch.clone(),
        }
    }

    /// `label or config`, plus ` · batch` when there is one.
    pub fn name(&self) -> String {
        let c = self.label.as_deref().unwrap_or(self.config.name());
        match &self.batch {
            Some(b) => format!("{c} · {b}"),
            None => c.to_string(),
        }
    }
}

/// Every series of a file, in [`Config::ALL`] order, then label and batch.
pub fn series_keys(f: &ResultFile) -> Vec<SeriesKey> {
    let mut v: Vec<SeriesKey> = f.points.iter().map(SeriesKey::of).collect();
    v.sort();
    v.dedup();
    v
}

/// The configurations of a file, in [`Config::ALL`] order.
pub fn configs(f: &ResultFile) -> Vec<Config> {
    let mut v: Vec<Config> = f.points.iter().map(|p| p.config).collect();
    v.sort();
    v.dedup();
    v
}

/// The batch programs of a file, in first-seen order.
pub fn batches(f: &ResultFile) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for p in &f.points {
        if let Some(b) = &p.batch {
            if !v.contains(b) {
                v.push(b.clone());
            }
        }
    }
    v
}

/// The points of a series, by load.
pub fn series<'a>(f: &'a ResultFile, key: &SeriesKey) -> Vec<&'a Point> {
    let mut v: Vec<&Point> = f
        .points
        .iter()
        .filter(|p| SeriesKey::of(p) == *key)
        .collect();
    v.sort_by(|a, b| a.rps_target.total_cmp(&b.rps_target));
    v
}

/// The points of `config` (any label) with `batch`, by load.
pub fn config_series<'a>(f: &'a ResultFile, config: Config, batch: Option<&str>) -> Vec<&'a Point> {
    let mut v: Vec<&Point> = f
        .points
        .iter()
        .filter(|p| p.config == config && p.batch.as_deref() == batch)
        .collect();
    v.sort_by(|a, b| a.rps_target.total_cmp(&b.rps_target));
    v
}

/// The point of `config` with `batch` at `rps` (LC alone: any batch).
pub fn point<'a>(
    f: &'a ResultFile,
    config: Config,
    batch: Option<&str>,
    rps: f64,
) -> Option<&'a Point> {
    f.points.iter().find(|p| {
        p.config == config
            && p.rps_target == rps
            && (config == Config::LcAlone || p.batch.as_deref() == batch)
    })
}

/// LC alone at `rps`: the baseline of every ratio.
pub fn baseline(f: &ResultFile, rps: f64) -> Option<&Point> {
    point(f, Config::LcAlone, None, rps)
}

/// Whether the file's rounds pair up (common random numbers).
pub fn paired_rounds(f: &ResultFile) -> bool {
    match f.source {
        Source::Measured => f.run.as_ref().is_some_and(|r| r.common_random_numbers),
        // The simulator seeds repetition i of every configuration alike.
        Source::Simulated => true,
    }
}

/// Paired p99 ratios of `p` to `base`: for every round both measured,
/// `p99 of p / p99 of base` in that round (by position for reps without a
/// round). Empty when no round pairs up or a base p99 is not positive.
pub fn paired_p99_ratios(p: &Point, base: &Point) -> Vec<f64> {
    paired_reps(p, base)
        .into_iter()
        .filter(|(_, b)| b.latency_us.p99 > 0.0)
        .map(|(r, b)| r.latency_us.p99 / b.latency_us.p99)
        .collect()
}

/// The reps of `p` with `base`'s rep of the same round (by position when
/// a rep has no round), in `p`'s order; a rep of `p` without one is left
/// out.
pub fn paired_reps<'a>(p: &'a Point, base: &'a Point) -> Vec<(&'a Rep, &'a Rep)> {
    let by_round = p.reps.iter().chain(&base.reps).all(|r| r.round.is_some());
    p.reps
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let b = if by_round {
                base.reps.iter().find(|b| b.round == r.round)
            } else {
                base.reps.get(i)
            };
            Some((r, b?))
        })
        .collect()
}

/// The paired ratio of `p` to LC alone at its load (median, min, max over
/// rounds), for files whose rounds pair up.
pub fn paired_ratio(f: &ResultFile, p: &Point) -> Option<Stat> {
    if !paired_rounds(f) || p.config == Config::LcAlone {
        return None;
    }
    Stat::of(&paired_p99_ratios(p, baseline(f, p.rps_target)?))
}

/// Median p99 of `p` / LC alone's median p99 at its load.
pub fn ratio_of_medians(f: &ResultFile, p: &Point) -> Option<f64> {
    let b = baseline(f, p.rps_target)?.summary.latency_us.p99.median;
    (b > 0.0).then(|| p.summary.latency_us.p99.median / b)
}

/// The knee of a p99-vs-load curve (Kneedle on the normalized curve, with
/// the zero-load point `(0, p99_at_zero)` prepended): the load whose point
/// lies farthest below the chord from the origin to the last point.
/// Returns the index into `points` (`(rps, p99)`, ascending rps).
pub fn knee_index(points: &[(f64, f64)], p99_at_zero: f64) -> Option<usize> {
    if points.is_empty() {
        return None;
    }
    let xmax = points.iter().map(|p| p.0).fold(0.0, f64::max);
    let y0 = p99_at_zero.min(points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min));
    let ymax = points.iter().map(|p| p.1).fold(f64::MIN, f64::max);
    if xmax <= 0.0 || ymax - y0 <= ymax * 1e-6 {
        return Some(points.len() - 1);
    }
    let mut best = (f64::MIN, points.len() - 1);
    for (i, &(x, y)) in points.iter().enumerate() {
        let d = x / xmax - (y - y0) / (ymax - y0);
        if d > best.0 + 1e-12 {
            best = (d, i);
        }
    }
    Some(best.1)
}

/// LC alone's `(rps, median p99 µs)` curve.
pub fn lc_alone_curve(f: &ResultFile) -> Vec<(f64, f64)> {
    config_series(f, Config::LcAlone, None)
        .iter()
        .map(|p| (p.rps_target, p.summary.latency_us.p99.median))
        .filter(|p| p.1.is_finite())
        .collect()
}

/// The LC service's p99 alone at zero load: the recorded demand's p99.
pub fn p99_at_zero_us(f: &ResultFile) -> f64 {
    f.run
        .as_ref()
        .map(|r| r.lc.demand_alone_p99_us)
        .filter(|x| *x > 0.0)
        .or_else(|| f.demand.as_ref().and_then(|d| d.quantile(0.99)))
        .unwrap_or(0.0)
}

/// The knee of LC alone's p99 curve in this file, rps.
pub fn knee_rps(f: &ResultFile) -> Option<f64> {
    let c = lc_alone_curve(f);
    knee_index(&c, p99_at_zero_us(f)).map(|i| c[i].0)
}

/// The highest LC-alone median p99 at loads up to `knee_rps` (µs): an SLO
/// LC alone meets at every one of those loads, in this file.
pub fn lc_alone_slo_us(f: &ResultFile, knee_rps: f64) -> Option<f64> {
    lc_alone_curve(f)
        .into_iter()
        .filter(|p| p.0 <= knee_rps)
        .map(|p| p.1)
        .reduce(f64::max)
}

/// The SLO the file's points were judged against, µs.
pub fn slo_us(f: &ResultFile) -> Option<f64> {
    f.run
        .as_ref()
        .and_then(|r| r.slo.p99_us)
        .or_else(|| f.points.iter().find_map(|p| p.summary.slo_p99_us))
}

/// The least confidence of the interval a verdict rests on.
pub const VERDICT_CONFIDENCE: f64 = 0.75;

/// Fewest rounds whose interval of the median reaches
/// [`VERDICT_CONFIDENCE`] (3: the lowest and highest of 3 rounds cover the
/// median with 75 %).
pub const MIN_VERDICT_ROUNDS: usize = 3;

/// A distribution-free confidence interval for the median of `xs` (the
/// sign test's): the order statistics `x(k)` and `x(n+1-k)` for the
/// largest `k` whose coverage, `1 - 2 P[Binomial(n, 1/2) < k]`, is at
/// least `confidence`. With 3 to 5 values at 75 % that is their lowest and
/// highest, with 6 to 8 the second lowest and second highest. `None` when
/// even the lowest and highest cover less (fewer than 3 values at 75 %) or a
/// value is not finite.
pub fn median_interval(xs: &[f64], confidence: f64) -> Option<(f64, f64)> {
    let n = xs.len();
    if n == 0 || xs.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    // tail = P[Binomial(n, 1/2) < k], growing with k
    let mut p = 0.5f64.powi(i32::try_from(n).unwrap_or(i32::MAX));
    let mut tail = 0.0;
    let mut best = None;
    for k in 1..=n.div_ceil(2) {
        tail += p;
        p *= (n - (k - 1)) as f64 / k as f64;
        if 1.0 - 2.0 * tail >= confidence - 1e-12 {
            best = Some(k);
        } else {
            break;
        }
    }
    best.map(|k| (v[k - 1], v[n - k]))
}

/// What one load's rounds say against the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadVerdict {
    /// The interval of the median ratio lies at or below the limit.
    Kept,
    /// The interval lies wholly above the limit.
    Hurt,
    /// The interval straddles the limit, or there are too few rounds for one.
    Inconclusive,
}

/// The rule every verdict follows, in words, for a limit of `limit`
/// (× LC alone's p99).
pub fn verdict_rule(limit: f64) -> String {
    format!(
        "per load, the p99 ratio to LC alone and its {:.0} % confidence interval: from {} \
         rounds with latency histograms, the p99 of all their requests over LC alone's in the \
         same rounds (pooled), its interval from a bootstrap over rounds (paired, {} \
         resamples); with fewer, the median over rounds of the per-round ratio (paired by \
         round) and its sign-test interval (with 3-5 rounds the lowest to the highest round): \
         kept if the interval lies at or below {limit:.2}x, HURT if wholly above, \
         inconclusive if it straddles {limit:.2}x or there are fewer than {} rounds; a \
         configuration is HURT if any load is, kept if every load is, else inconclusive",
        VERDICT_CONFIDENCE * 100.0,
        pooled::MIN_POOLED_ROUNDS,
        pooled::RESAMPLES,
        MIN_VERDICT_ROUNDS
    )
}

/// One load of a [`Protection`] judgement.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadJudgement {
    /// Load, rps.
    pub rps: f64,
    /// Paired p99 ratio to LC alone over rounds, when rounds pair up.
    pub paired: Option<Stat>,
    /// Rounds that paired up.
    pub rounds: usize,
    /// Ratio of medians.
    pub ratio_of_medians: Option<f64>,
    /// Median p99, µs.
    pub p99_us: f64,
    /// LC alone's median p99, µs.
    pub base_p99_us: f64,
    /// Median total utilization.
    pub util_total: f64,
    /// LC alone's median total utilization.
    pub base_util_total: f64,
    /// The pooled p99 ratio and its bootstrap interval, where the rounds
    /// pair up with histograms and there are [`pooled::MIN_POOLED_ROUNDS`].
    pub pooled: Option<pooled::Pooled>,
    /// The ratio shown and judged: the pooled ratio where there is one,
    /// else the paired median where rounds pair up, else the ratio of
    /// medians.
    pub ratio: f64,
    /// The [`VERDICT_CONFIDENCE`] interval the verdict rests on: the pooled
    /// ratio's where there is one, else the median ratio's over rounds
    /// (paired; where rounds do not pair, each invocation's p99 over LC
    /// alone's median); `None` with fewer than [`MIN_VERDICT_ROUNDS`].
    pub interval: Option<(f64, f64)>,
    /// The interval against the limit.
    pub verdict: LoadVerdict,
}

/// What a protection judgement concluded ([`verdict_rule`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// p99 within the tolerance of LC alone at every judged load.
    Kept,
    /// Worse than the tolerance at one judged load or more.
    Hurt,
    /// Neither: at some load the rounds straddle the limit (or are too few).
    Inconclusive,
    /// No load to judge (no LC-alone point, or none up to the knee).
    NotJudged,
}

impl Verdict {
    /// A word for tables.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Kept => "kept p99",
            Verdict::Hurt => "HURT p99",
            Verdict::Inconclusive => "inconclusive",
            Verdict::NotJudged => "not judged",
        }
    }
}

/// The per-round ratios of `p` to `base` the interval is taken over: paired
/// by round where the file's rounds pair, else each invocation's p99 over
/// LC alone's median p99.
fn round_ratios(f: &ResultFile, p: &Point, base: &Point) -> Vec<f64> {
    if paired_rounds(f) {
        return paired_p99_ratios(p, base);
    }
    let b = base.summary.latency_us.p99.median;
    if b > 0.0 {
        p.reps.iter().map(|r| r.latency_us.p99 / b).collect()
    } else {
        Vec::new()
    }
}

/// The verdict of one load whose median-ratio interval is `interval`.
pub fn load_verdict(interval: Option<(f64, f64)>, limit: f64) -> LoadVerdict {
    match interval {
        Some((_, hi)) if hi <= limit => LoadVerdict::Kept,
        Some((lo, _)) if lo > limit => LoadVerdict::Hurt,
        _ => LoadVerdict::Inconclusive,
    }
}

/// Did a series keep the LC's p99 at LC alone's, at every load up to the
/// knee?
#[derive(Debug, Clone, PartialEq)]
pub struct Protection {
    /// The series.
    pub key: SeriesKey,
    /// The judged loads (up to the knee, where both it and LC alone ran).
    pub loads: Vec<LoadJudgement>,
    /// The conclusion.
    pub verdict: Verdict,
}

/// Judges every series with batch work against LC alone at each load up to
/// the knee of LC alone's curve, by [`verdict_rule`] with the limit
/// `1 + tolerance`. `knee_rps` overrides the file's own knee (`None`:
/// [`knee_rps`]).
pub fn protection(f: &ResultFile, tolerance: f64, knee: Option<f64>) -> Vec<Protection> {
    let knee = knee.or_else(|| knee_rps(f));
    let limit = 1.0 + tolerance;
    let mut out = Vec::new();
    for key in series_keys(f).into_iter().filter(|k| k.config.has_batch()) {
        let mut loads = Vec::new();
        for p in series(f, &key) {
            if knee.is_none_or(|k| p.rps_target > k) {
                continue;
            }
            let Some(base) = baseline(f, p.rps_target) else {
                continue;
            };
            let paired = paired_ratio(f, p);
            let rom = ratio_of_medians(f, p);
            let pooled = paired_rounds(f)
                .then(|| pooled::pooled_p99_ratio(p, base, VERDICT_CONFIDENCE))
                .flatten();
            let Some(ratio) = pooled.map(|x| x.ratio).or(paired.map(|s| s.median)).or(rom) else {
                continue;
            };
            let interval = match pooled {
                Some(x) => Some(x.interval),
                None => median_interval(&round_ratios(f, p, base), VERDICT_CONFIDENCE),
            };
            loads.push(LoadJudgement {
                rps: p.rps_target,
                paired,
                rounds: paired_p99_ratios(p, base).len(),
                ratio_of_medians: rom,
                pooled,
                p99_us: p.summary.latency_us.p99.median,
                base_p99_us: base.summary.latency_us.p99.median,
                util_total: p.summary.utilization.total.median,
                base_util_total: base.summary.utilization.total.median,
                ratio,
                interval,
                verdict: load_verdict(interval, limit),
            });
        }
        let verdict = if loads.is_empty() {
            Verdict::NotJudged
        } else if loads.iter().any(|l| l.verdict == LoadVerdict::Hurt) {
            Verdict::Hurt
        } else if loads.iter().all(|l| l.verdict == LoadVerdict::Kept) {
            Verdict::Kept
        } else {
            Verdict::Inconclusive
        };
        out.push(Protection {
            key,
            loads,
            verdict,
        });
    }
    out
}

/// A judged load whose verdict is open: its interval straddles the limit
/// (or it has too few rounds for one).
#[derive(Debug, Clone, PartialEq)]
pub struct Open {
    /// The series.
    pub key: SeriesKey,
    /// The load, rps.
    pub rps: f64,
    /// Rounds that paired up so far.
    pub rounds: usize,
}

/// The open verdicts of `prot` ([`protection`]), by load then series: the
/// inconclusive loads of every series whose verdict is inconclusive (a
/// series HURT at one load is HURT whatever its other loads say). Those
/// with fewer than `max_rounds` paired rounds can take another round, the
/// rest have reached the cap.
pub fn open_verdicts(prot: &[Protection], max_rounds: usize) -> (Vec<Open>, Vec<Open>) {
    let mut open: Vec<Open> = prot
        .iter()
        .filter(|p| p.verdict == Verdict::Inconclusive)
        .flat_map(|p| {
            p.loads
                .iter()
                .filter(|l| l.verdict == LoadVerdict::Inconclusive)
                .map(|l| Open {
                    key: p.key.clone(),
                    rps: l.rps,
                    rounds: l.rounds,
                })
        })
        .collect();
    open.sort_by(|a, b| a.rps.total_cmp(&b.rps).then_with(|| a.key.cmp(&b.key)));
    open.into_iter().partition(|o| o.rounds < max_rounds)
}

/// One row of the side-by-side table: a point with its ratios.
#[derive(Debug, Clone, PartialEq)]
pub struct Row<'a> {
    /// The point.
    pub point: &'a Point,
    /// Ratio of medians to LC alone.
    pub ratio_of_medians: Option<f64>,
    /// Paired ratio to LC alone.
    pub paired: Option<Stat>,
}

impl Row<'_> {
    /// `max(ratio − 1, 0)` (resctl-bench's latency impact), from the paired
    /// ratio where there is one.
    pub fn impact(&self) -> Option<f64> {
        self.paired
            .map(|s| s.median)
            .or(self.ratio_of_medians)
            .map(|r| (r - 1.0).max(0.0))
    }
}

/// The rows for one batch program: per load, LC alone then every
/// configuration that ran with `batch` (`None`: LC alone only).
pub fn rows<'a>(f: &'a ResultFile, batch: Option<&str>) -> Vec<Row<'a>> {
    let mut out = Vec::new();
    let keys = series_keys(f);
    for rps in loads(f) {
        for key in keys
            .iter()
            .filter(|k| k.config == Config::LcAlone || k.batch.as_deref() == batch)
        {
            for p in series(f, key).into_iter().filter(|p| p.rps_target == rps) {
                out.push(Row {
                    point: p,
                    ratio_of_medians: ratio_of_medians(f, p),
                    paired: paired_ratio(f, p),
                });
            }
        }
    }
    out
}

/// How noisy the machine was during the measured windows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Noise {
    /// Invocations with a record.
    pub invocations: usize,
    /// Other processes' CPU, lanes: median and max.
    pub foreign: Stat,
    /// The host's steal, lanes: median and max.
    pub steal: Stat,
    /// Invocations above `limit` lanes of foreign + steal that were kept.
    pub kept_disturbed: usize,
    /// Re-runs of disturbed invocations.
    pub reruns: u32,
    /// The limit applied, lanes.
    pub limit: f64,
}

/// The noise of a measured file; `limit` is the disturbance (lanes) above
/// which an invocation counts as disturbed.
pub fn noise(f: &ResultFile, limit: f64) -> Option<Noise> {
    let m: Vec<_> = f
        .points
        .iter()
        .flat_map(|p| p.reps.iter().filter_map(|r| r.measured.as_ref()))
        .collect();
    let foreign: Vec<f64> = m.iter().map(|r| r.foreign_util).collect();
    let steal: Vec<f64> = m.iter().map(|r| r.steal_util).collect();
    Some(Noise {
        invocations: m.len(),
        foreign: Stat::of(&foreign)?,
        steal: Stat::of(&steal)?,
        kept_disturbed: m.iter().filter(|r| r.disturbance() > limit).count(),
        reruns: m.iter().map(|r| r.disturbed_retries).sum(),
        limit,
    })
}

/// The largest budget (µs) any invocation of `p` had.
pub fn budget_us(p: &Point) -> Option<f64> {
    p.reps.iter().filter_map(|r| r.budget_us).reduce(f64::max)
}

/// A statistic over the reps of `p` that have it.
pub fn rep_stat(p: &Point, f: impl Fn(&Rep) -> Option<f64>) -> Option<Stat> {
    Stat::of(&p.reps.iter().filter_map(f).collect::<Vec<_>>())
}

/// The share of a histogram's total (by its per-bucket sums) in values up
/// to `x`, counting the bucket holding `x` in proportion — e.g. the share of
/// idle time in idle periods shorter than `x` (the paper's Figure 5).
pub fn share_below(d: &Distribution, x: f64) -> Option<f64> {
    if d.sums.len() != d.counts.len() || d.edges.len() != d.counts.len() + 1 {
        return None;
    }
    let total: f64 = d.sums.iter().sum();
    if total <= 0.0 {
        return None;
    }
    let mut below = 0.0;
    for (i, s) in d.sums.iter().enumerate() {
        let (lo, hi) = (d.edges[i], d.edges[i + 1]);
        if hi <= x {
            below += s;
        } else if lo < x {
            below += s * (x - lo) / (hi - lo);
        }
    }
    Some(below / total)
}

#[cfg(test)]
mod tests;
