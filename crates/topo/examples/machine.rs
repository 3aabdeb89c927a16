//! Prints what elfen-topo sees on this machine: lanes, the default pairing, features
//! and the system info stored with result files.
//!
//! `cargo run -p elfen-topo --example machine [-- PAIRING_SPEC]`

fn main() -> Result<(), elfen_topo::TopoError> {
    let topo = elfen_topo::Topology::detect()?;
    println!(
        "lanes: {} ({}-way SMT)",
        elfen_topo::format_cpu_list(&topo.cpus()),
        topo.smt_ways()
    );
    let spec = std::env::args().nth(1);
    println!(
        "{}",
        elfen_topo::plan_pairs(&topo, spec.as_deref())?.describe()
    );
    println!(
        "affinity: {}",
        elfen_topo::format_cpu_list(&elfen_topo::current_affinity()?)
    );
    let info = elfen_topo::SystemInfo::collect();
    for line in info.features.describe() {
        println!("  {line}");
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&info).expect("SystemInfo serializes")
    );
    Ok(())
}
