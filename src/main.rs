fn main() {
    std::process::exit(talos_gen::cli::main());
}
