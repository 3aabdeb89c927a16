//! One `[[configs]]` entry resolved: the configuration's name, batch kind,
//! policy, budget and baseline parameters, with every field that does not
//! apply to its kind refused by name.

use super::{Budget, Config, ConfigKind, ConfigSpec, SimConfig, Topology, sim_policy};
use crate::error::{SimError, at_least, invalid, non_negative, positive};
use elfen_policy::blind::BlindIsolation;
use elfen_policy::{DEFAULT_MAX_BUDGET_RATIO, PolicyConfig};

impl SimConfig {
    pub(super) fn resolve_config(
        &self,
        i: usize,
        c: &ConfigSpec,
        topo: &Topology,
        slo: Option<f64>,
    ) -> Result<Config, SimError> {
        let f = |name: &str| format!("configs[{i}].{name}");
        if !c.kind.in_simulator() {
            return Err(invalid(
                f("kind"),
                format!(
                    "{} is not modelled by the simulator ({}); the harness runs it: elfen bench",
                    c.kind,
                    c.kind.definition()
                ),
            ));
        }
        let name = c.name.clone().unwrap_or_else(|| c.kind.name().to_string());
        if name.trim().is_empty() {
            return Err(invalid(f("name"), "must not be empty"));
        }
        let policy_kind = sim_policy(c.kind);
        let uses_budget = policy_kind.is_some_and(|k| k.uses_budget());
        let dynamic = c.kind == ConfigKind::DynamicRefresh;
        refuse_fields_of_other_kinds(c, &f, uses_budget)?;

        let batch = if c.kind == ConfigKind::LcAlone {
            None
        } else {
            let (field, kind) = match &c.batch {
                Some(b) => (f("batch"), b.clone()),
                None => ("batch.kind".to_string(), self.batch.kind.clone()),
            };
            Some((kind.clone(), self.interference(&field, &kind)?))
        };

        let w = topo.server.worker_cores;
        if policy_kind.is_some() && topo.server.smt_ways < 2 {
            return Err(invalid(
                "topology.smt_ways",
                format!(
                    "must be >= 2 for configs[{i}] (kind = {:?} runs batch on the batch lanes), got {}",
                    c.kind.name(),
                    topo.server.smt_ways
                ),
            ));
        }
        let budget = budget_of(c, &f, uses_budget, slo)?;
        let policy = match policy_kind {
            None => None,
            Some(k) => {
                let mut p = PolicyConfig::simple(k);
                if let Budget::Fixed(ns) = budget {
                    p.budget_ns = ns;
                }
                if dynamic {
                    p.ref_ipc = Some(positive(&f("ref_ipc"), c.ref_ipc.unwrap_or(1.0))?);
                    p.max_budget_ratio = c.max_budget_ratio.unwrap_or(DEFAULT_MAX_BUDGET_RATIO);
                    if !(p.max_budget_ratio.is_finite() && p.max_budget_ratio >= 1.0) {
                        return Err(invalid(
                            f("max_budget_ratio"),
                            format!("must be finite and >= 1, got {}", p.max_budget_ratio),
                        ));
                    }
                }
                p.validate()?;
                Some(p)
            }
        };
        let blind = blind_of(c, &f, w)?;
        let batch_cores = batch_cores_of(c, &f, w)?;
        Ok(Config {
            name,
            kind: c.kind,
            batch,
            policy,
            budget,
            blind,
            batch_cores,
        })
    }
}

/// Refuses the fields that do not apply to the entry's kind, naming them.
fn refuse_fields_of_other_kinds(
    c: &ConfigSpec,
    f: &dyn Fn(&str) -> String,
    uses_budget: bool,
) -> Result<(), SimError> {
    let not_for = |field: &str, set: bool| -> Result<(), SimError> {
        if set {
            Err(invalid(
                f(field),
                format!("does not apply to kind = {:?}", c.kind.name()),
            ))
        } else {
            Ok(())
        }
    };
    let dynamic = c.kind == ConfigKind::DynamicRefresh;
    not_for("budget_us", !uses_budget && c.budget_us.is_some())?;
    not_for("budget_from_slo", !uses_budget && c.budget_from_slo)?;
    not_for("ref_ipc", !dynamic && c.ref_ipc.is_some())?;
    not_for("max_budget_ratio", !dynamic && c.max_budget_ratio.is_some())?;
    not_for(
        "buffer_cores",
        c.kind != ConfigKind::BlindIsolation && c.buffer_cores.is_some(),
    )?;
    not_for(
        "batch_cores",
        c.kind != ConfigKind::StaticPartition && c.batch_cores.is_some(),
    )?;
    not_for("batch", c.kind == ConfigKind::LcAlone && c.batch.is_some())
}

/// The budget of a budget policy: given, or from the SLO headroom.
fn budget_of(
    c: &ConfigSpec,
    f: &dyn Fn(&str) -> String,
    uses_budget: bool,
    slo: Option<f64>,
) -> Result<Budget, SimError> {
    Ok(if uses_budget {
        match (c.budget_us, c.budget_from_slo) {
            (Some(_), true) => {
                return Err(invalid(
                    f("budget_us"),
                    "give budget_us or budget_from_slo, not both",
                ));
            }
            (Some(b), false) => {
                Budget::Fixed((non_negative(&f("budget_us"), b)? * 1e3).round() as u64)
            }
            (None, true) => {
                if slo.is_none() {
                    return Err(invalid(f("budget_from_slo"), "needs slo_p99_us to be set"));
                }
                Budget::FromSlo
            }
            (None, false) => {
                return Err(invalid(
                    f("budget_us"),
                    format!(
                        "is required for kind = {:?} (or set budget_from_slo = true)",
                        c.kind.name()
                    ),
                ));
            }
        }
    } else {
        Budget::None
    })
}

/// Blind isolation's buffer cores.
fn blind_of(
    c: &ConfigSpec,
    f: &dyn Fn(&str) -> String,
    w: u32,
) -> Result<Option<BlindIsolation>, SimError> {
    Ok(if c.kind == ConfigKind::BlindIsolation {
        let Some(b) = c.buffer_cores else {
            return Err(invalid(
                f("buffer_cores"),
                "is required for kind = \"blind_isolation\"",
            ));
        };
        let b = at_least(&f("buffer_cores"), b, 1)?;
        if b > u64::from(w) {
            return Err(invalid(
                f("buffer_cores"),
                format!("must be <= the worker cores ({w}), got {b}"),
            ));
        }
        Some(BlindIsolation {
            buffer_cores: b as u32,
        })
    } else {
        None
    })
}

/// Static partition's batch cores.
fn batch_cores_of(c: &ConfigSpec, f: &dyn Fn(&str) -> String, w: u32) -> Result<u32, SimError> {
    Ok(if c.kind == ConfigKind::StaticPartition {
        let Some(k) = c.batch_cores else {
            return Err(invalid(
                f("batch_cores"),
                "is required for kind = \"static_partition\"",
            ));
        };
        let k = at_least(&f("batch_cores"), k, 1)?;
        if k >= u64::from(w) {
            return Err(invalid(
                f("batch_cores"),
                format!(
                    "must be < the worker cores ({w}) so the LC keeps a core, got {k} \
                         (on one core the only static split is cpuset)"
                ),
            ));
        }
        k as u32
    } else {
        0
    })
}
