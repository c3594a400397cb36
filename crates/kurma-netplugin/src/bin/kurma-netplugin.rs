//! `/opt/network/{setup,add,del}`: see `kurma_netplugin::cli`.

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    kurma_netplugin::cli::main(&args)
}
