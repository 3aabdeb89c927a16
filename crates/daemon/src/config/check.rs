//! [`Config::check`]: every check that needs only the file.

use super::{BatchSection, Config, GroupRef, IdleMethod, Mode};
use crate::error::ConfigError;
use elfen_cgroup::QosClass;
use elfen_runtime::NapChoice;

impl Config {
    /// Every check that needs only the file: exactly one LC selector,
    /// batch groups named uniquely with exactly one of `cgroup` / `command`,
    /// values in range, a valid policy. The first problem is returned.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.heartbeat_ms == 0 {
            return Err(ConfigError::new("heartbeat_ms", "must be at least 1"));
        }
        if let Some(p) = &self.pairs {
            elfen_topo::parse_pair_spec(p).map_err(|e| ConfigError::new("pairs", e.to_string()))?;
        }
        if self.page.path.as_os_str().is_empty() {
            return Err(ConfigError::new("page", "must not be empty"));
        }
        if let Some(GroupRef::Name(n)) = &self.page.batch_group {
            if n.is_empty() {
                return Err(ConfigError::new(
                    "page.batch_group",
                    "must not be empty (a group name or a gid)",
                ));
            }
        }
        if self.state_file.as_os_str().is_empty() || self.state_file.is_dir() {
            return Err(ConfigError::new("state_file", "must name a file"));
        }
        self.check_policy()?;
        self.check_lc()?;
        self.check_threads()?;
        if self.freeze.timeout_ms == 0 {
            return Err(ConfigError::new("freeze.timeout_ms", "must be at least 1"));
        }
        self.metrics.addr()?;
        crate::isolation::config::check_tables(&self.memory, &self.io)?;
        if self.blind.poll_us < 20 {
            return Err(ConfigError::new("blind.poll_us", "must be at least 20"));
        }
        self.check_modes()?;
        if self.batch.is_empty() {
            return Err(ConfigError::new(
                "batch",
                "no batch group: add at least one [[batch]] with a mode and a cgroup or command",
            ));
        }
        for (i, b) in self.batch.iter().enumerate() {
            check_batch(i, b, &self.batch[..i])?;
        }
        Ok(())
    }

    fn check_policy(&self) -> Result<(), ConfigError> {
        let p = &self.policy;
        p.policy_config()
            .validate()
            .map_err(|e| ConfigError::new("policy.ref_ipc", e.to_string()))?;
        if p.kind.uses_budget() && p.budget_us == 0 {
            return Err(ConfigError::new(
                "policy.budget_us",
                format!(
                    "{} needs a budget (the paper's: SLO − p99 of the LC alone)",
                    p.kind
                ),
            ));
        }
        if let Some(slo) = p.slo_us {
            if slo == 0 {
                return Err(ConfigError::new("policy.slo_us", "must be at least 1"));
            }
            if p.budget_us >= slo {
                return Err(ConfigError::new(
                    "policy.budget_us",
                    format!(
                        "{} µs does not fit in the SLO of {slo} µs (a budget is SLO headroom)",
                        p.budget_us
                    ),
                ));
            }
        }
        p.nap
            .parse::<NapChoice>()
            .map_err(|e| ConfigError::new("policy.nap", e.to_string()))?;
        Ok(())
    }

    fn check_lc(&self) -> Result<(), ConfigError> {
        let lc = &self.lc;
        let n = [
            lc.pid.is_some(),
            lc.cgroup.is_some(),
            lc.comm.is_some(),
            lc.unit.is_some(),
            lc.slice.is_some(),
            lc.container.is_some(),
            lc.pod.is_some(),
            lc.pod_uid.is_some(),
            lc.qos.is_some(),
        ]
        .into_iter()
        .filter(|&b| b)
        .count();
        if n != 1 {
            return Err(ConfigError::new(
                "lc",
                format!(
                    "name the LC service by exactly one of pid, comm, cgroup, unit, slice, \
                     container, pod, pod_uid, qos ({n} given)"
                ),
            ));
        }
        let group = lc.selector()?;
        if lc.pid == Some(0) {
            return Err(ConfigError::new("lc.pid", "0 is not a process"));
        }
        if let Some(c) = &lc.cgroup {
            if !c.is_absolute() {
                return Err(ConfigError::new(
                    "lc.cgroup",
                    format!("{} must be an absolute path", c.display()),
                ));
            }
        }
        if let Some(c) = &lc.comm {
            if c.is_empty() || c.contains('/') {
                return Err(ConfigError::new(
                    "lc.comm",
                    format!("{c:?}: a command name, without '/'"),
                ));
            }
        }
        if let Some(u) = &lc.user {
            if u.trim().is_empty() {
                return Err(ConfigError::new("lc.user", "a user name or uid, not empty"));
            }
            if let Some((_, key)) = &group {
                return Err(ConfigError::new(
                    "lc.user",
                    format!(
                        "applies to pid and comm, not {key}: a group's processes are what its \
                         owner put there"
                    ),
                ));
            }
        }
        for (f, v) in [
            ("lc.liveness_ms", lc.liveness_ms),
            ("lc.rescan_ms", lc.rescan_ms),
            ("lc.lost_rescan_ms", lc.lost_rescan_ms),
            ("lc.unseen_window_ms", lc.unseen_window_ms),
        ] {
            if v == 0 {
                return Err(ConfigError::new(f, "must be at least 1"));
            }
        }
        Ok(())
    }

    fn check_threads(&self) -> Result<(), ConfigError> {
        if !(1..=98).contains(&self.guard.priority) {
            return Err(ConfigError::new(
                "guard.priority",
                format!(
                    "{} is not a SCHED_FIFO priority in 1..=98 (the writer runs one above)",
                    self.guard.priority
                ),
            ));
        }
        if !(100..=1_000_000).contains(&self.guard.spin_max_us) {
            return Err(ConfigError::new(
                "guard.spin_max_us",
                format!(
                    "{} is not in 100..=1000000: the bound on a real-time spin per busy period \
                     (longer would let the kernel's own throttling decide)",
                    self.guard.spin_max_us
                ),
            ));
        }
        if !(1..=100).contains(&self.guard.spin_share_pct) {
            return Err(ConfigError::new(
                "guard.spin_share_pct",
                format!("{} is not a share in 1..=100", self.guard.spin_share_pct),
            ));
        }
        if let Some(p) = self.signal.priority {
            if p > 99 {
                return Err(ConfigError::new(
                    "signal.priority",
                    format!("{p}: SCHED_FIFO priorities are 1..=99 (0 = SCHED_OTHER)"),
                ));
            }
        }
        let guards = self.batch.iter().any(|b| b.mode.may_guard(self));
        if guards && self.writer_priority() <= self.guard.priority {
            return Err(ConfigError::new(
                "signal.priority",
                format!(
                    "{} must be above guard.priority ({}): the writer has to preempt a spinning guard to publish the idle edge",
                    self.writer_priority(),
                    self.guard.priority
                ),
            ));
        }
        if self.signal.poll_interval_us < 100 {
            return Err(ConfigError::new(
                "signal.poll_interval_us",
                "must be at least 100",
            ));
        }
        if self.signal.cpus.as_ref().is_some_and(|c| c.is_empty()) {
            return Err(ConfigError::new("signal.cpus", "must not be empty"));
        }
        Ok(())
    }

    /// `[freeze]`'s fallback and `[auto]`'s ladder and thresholds.
    fn check_modes(&self) -> Result<(), ConfigError> {
        if !matches!(self.freeze.fallback, Mode::Idle | Mode::Guard | Mode::Blind) {
            return Err(ConfigError::new(
                "freeze.fallback",
                format!(
                    "{}: one of idle, guard, blind (a mode that follows any service)",
                    self.freeze.fallback
                ),
            ));
        }
        if !matches!(self.scx.fallback, Mode::Idle | Mode::Guard) {
            return Err(ConfigError::new(
                "scx.fallback",
                format!(
                    "{}: idle or guard (what the group runs when the kernel unloads the \
                     scheduler)",
                    self.scx.fallback
                ),
            ));
        }
        if self.freeze.observe_ms == 0 {
            return Err(ConfigError::new("freeze.observe_ms", "must be at least 1"));
        }
        let a = &self.auto;
        if a.ladder.is_empty() {
            return Err(ConfigError::new(
                "auto.ladder",
                "name at least one mode, cheapest first (e.g. [\"idle\", \"guard\"])",
            ));
        }
        for (i, m) in a.ladder.iter().enumerate() {
            if !matches!(m, Mode::Idle | Mode::Guard | Mode::Freeze | Mode::Blind) {
                return Err(ConfigError::new(
                    "auto.ladder",
                    format!("{m}: one of idle, guard, freeze, blind"),
                ));
            }
            if a.ladder[..i].contains(m) {
                return Err(ConfigError::new(
                    "auto.ladder",
                    format!("{m} is named twice"),
                ));
            }
        }
        if a.solo_ms == 0 || a.period_ms < 4 * a.solo_ms {
            return Err(ConfigError::new(
                "auto.solo_ms",
                format!(
                    "{} ms: at least 1, and at most a quarter of period_ms ({} ms): the batch \
                     steps aside that long every period",
                    a.solo_ms, a.period_ms
                ),
            ));
        }
        if !(a.escalate_pct.is_finite() && a.settle_pct.is_finite())
            || a.settle_pct < 0.0
            || a.escalate_pct <= a.settle_pct
        {
            return Err(ConfigError::new(
                "auto.escalate_pct",
                format!(
                    "{} %: must be above settle_pct ({} %, at least 0): between the two nothing \
                     changes (the hysteresis)",
                    a.escalate_pct, a.settle_pct
                ),
            ));
        }
        if a.confirm == 0 {
            return Err(ConfigError::new("auto.confirm", "must be at least 1"));
        }
        if a.min_periods == 0 {
            return Err(ConfigError::new("auto.min_periods", "must be at least 1"));
        }
        Ok(())
    }
}

fn check_batch(i: usize, b: &BatchSection, before: &[BatchSection]) -> Result<(), ConfigError> {
    let f = |k: &str| format!("batch[{i}].{k}");
    if b.name.is_empty()
        || !b
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(ConfigError::new(
            f("name"),
            format!("{:?}: letters, digits, '-' and '_' only, not empty", b.name),
        ));
    }
    if before.iter().any(|o| o.name == b.name) {
        return Err(ConfigError::new(
            f("name"),
            format!("{:?} is used by an earlier group", b.name),
        ));
    }
    if b.mode == Mode::Blind && b.confine == Some(true) {
        return Err(ConfigError::new(
            f("confine"),
            "blind isolation drives the group's cpuset itself: leave confine out",
        ));
    }
    let named = [
        b.cgroup.is_some(),
        b.command.is_some(),
        b.slice.is_some(),
        b.unit.is_some(),
        b.container.is_some(),
        b.pod.is_some(),
        b.pod_uid.is_some(),
        b.qos.is_some(),
    ]
    .into_iter()
    .filter(|&x| x)
    .count();
    if named != 1 {
        return Err(ConfigError::new(
            format!("batch[{i}]"),
            "give exactly one of cgroup (an existing group), command (started by the daemon), \
             slice, unit, container, pod, pod_uid or qos (the host's name for an existing group)",
        ));
    }
    if b.qos == Some(QosClass::Guaranteed) {
        return Err(ConfigError::new(
            f("qos"),
            "guaranteed pods have no group of their own class (each sits directly under \
             kubepods): a batch group is one group — name the pod (pod, pod_uid) or use \
             besteffort / burstable",
        ));
    }
    b.selector(&format!("batch[{i}]"))?;
    match (&b.cgroup, &b.command) {
        (None, None) => {}
        (Some(_), Some(_)) => unreachable!("counted: exactly one"),
        (Some(g), None) => {
            if g.trim_matches('/').is_empty() {
                return Err(ConfigError::new(
                    f("cgroup"),
                    "the root group cannot be a batch group",
                ));
            }
            elfen_cgroup::GroupPath::new(g)
                .map_err(|e| ConfigError::new(f("cgroup"), e.to_string()))?;
        }
        (None, Some(argv)) => {
            if argv.first().is_none_or(|p| p.is_empty()) {
                return Err(ConfigError::new(f("command"), "empty command"));
            }
        }
    }
    if b.mode == Mode::Scx && b.idle_method == IdleMethod::SchedIdle {
        return Err(ConfigError::new(
            f("idle_method"),
            "mode scx puts the group's threads in the sched_ext class, which SCHED_IDLE would \
             take them out of: it yields by cpu.idle (leave idle_method out, or cpu_idle)",
        ));
    }
    if b.idle_method != IdleMethod::Auto
        && !matches!(b.mode, Mode::Guard | Mode::Idle | Mode::Auto | Mode::Scx)
    {
        return Err(ConfigError::new(
            f("idle_method"),
            format!(
                "only modes guard, idle, auto and scx use it, not {}",
                b.mode.name()
            ),
        ));
    }
    if b.mode == Mode::Auto && b.confine == Some(false) {
        return Err(ConfigError::new(
            f("confine"),
            "auto needs the group confined to the batch lanes (its guard and idle rungs do)",
        ));
    }
    crate::isolation::config::check_batch(&f, b.isolation_keys())
}
