//! The benchmarks' helper programs (`elfen isobench helper …`) as a
//! program of their own, for the crate's tests (`Helpers::Program`): the
//! arguments are the helper's (`lc-server --listen=…`, `balloon …`).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = elfen_isobench::helpers::run(&args) {
        eprintln!("elfen-isobench-helper {args:?}: {e:#}");
        std::process::exit(1);
    }
}
