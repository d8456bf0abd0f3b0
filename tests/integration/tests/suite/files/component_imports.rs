//! What the built component asks of its host. Spin (and Fermyon Cloud) provide WASI 0.2
//! and the `fermyon:spin/*@2.0.0` interfaces; an import of anything else (another Spin
//! version, sqlite, outbound HTTP...) would stop the component from starting there, and
//! on any other Spin 2 host, even where a newer Spin happens to serve it. Key-value holds
//! a Redis Cluster's slot map between requests (src/platform/p1/topology.rs).

use std::collections::BTreeSet;

use seckill_tests::drivers::app::{
    assert_built_from_current_sources, component_wasm, COMPONENT_SOURCES,
};
use wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER;
use wit_component::{ComponentEncoder, DecodedWasm};

const SPIN_INTERFACES: [&str; 5] = [
    "fermyon:spin/key-value@2.0.0",
    "fermyon:spin/mysql@2.0.0",
    "fermyon:spin/rdbms-types@2.0.0",
    "fermyon:spin/redis@2.0.0",
    "fermyon:spin/variables@2.0.0",
];
const HTTP_HANDLER: &str = "wasi:http/incoming-handler@0.2.0";

fn module() -> Vec<u8> {
    let path = component_wasm();
    assert_built_from_current_sources(&path, &COMPONENT_SOURCES);
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/build.sh first)", path.display()))
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|name| name.to_string()).collect()
}

fn print(label: &str, names: &BTreeSet<String>) {
    println!("{label}:\n  {}", Vec::from_iter(names.clone()).join("\n  "));
}

/// The module names the core module imports from: what the code itself (through
/// spin-sdk's bindings) links against, before any adapter is added.
fn core_import_modules(module: &[u8]) -> BTreeSet<String> {
    let mut modules = BTreeSet::new();
    for payload in wasmparser::Parser::new(0).parse_all(module) {
        if let wasmparser::Payload::ImportSection(section) = payload.expect("a valid module") {
            for import in section.into_imports() {
                modules.insert(import.expect("a valid import").module.to_string());
            }
        }
    }
    modules
}

/// The interfaces the component imports and exports once the module is turned into a
/// component the way Spin does it: with the preview1 reactor adapter.
fn component_world(module: &[u8]) -> (BTreeSet<String>, BTreeSet<String>) {
    let component = ComponentEncoder::default()
        .validate(true)
        .module(module)
        .and_then(|encoder| {
            encoder.adapter(
                "wasi_snapshot_preview1",
                WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
            )
        })
        .and_then(|mut encoder| encoder.encode())
        .expect("the module componentizes");
    let DecodedWasm::Component(resolve, world) =
        wit_component::decode(&component).expect("the component decodes")
    else {
        panic!("decoded a WIT package, not a component");
    };
    let world = &resolve.worlds[world];
    let imports = world.imports.keys();
    let exports = world.exports.keys();
    (
        imports.map(|key| resolve.name_world_key(key)).collect(),
        exports.map(|key| resolve.name_world_key(key)).collect(),
    )
}

#[test]
fn the_code_itself_imports_only_wasi_0_2_0_and_spin_2_0_0() {
    let modules = core_import_modules(&module());
    print("core module imports from", &modules);
    // rdbms-types has no functions, so it only shows up in the component's types;
    // wasi:io comes with wasi:http's streams, and the monotonic clock is the deadline a
    // request body is read within. WASI preview1 is what the adapter turns into WASI 0.2
    // imports (see the next test).
    let expected = set(&[
        "fermyon:spin/key-value@2.0.0",
        "fermyon:spin/mysql@2.0.0",
        "fermyon:spin/redis@2.0.0",
        "fermyon:spin/variables@2.0.0",
        "wasi:clocks/monotonic-clock@0.2.0",
        "wasi:http/types@0.2.0",
        "wasi:io/error@0.2.0",
        "wasi:io/poll@0.2.0",
        "wasi:io/streams@0.2.0",
        "wasi_snapshot_preview1",
    ]);
    assert_eq!(modules, expected);
}

#[test]
fn the_component_imports_only_wasi_0_2_and_spin_2_0_0_and_exports_the_http_handler() {
    let (imports, exports) = component_world(&module());
    print("component imports", &imports);
    print("component exports", &exports);

    assert_eq!(exports, set(&[HTTP_HANDLER]));
    for import in &imports {
        let wasi_0_2 = import.starts_with("wasi:") && import.contains("@0.2.");
        let spin_2_0_0 = import.starts_with("fermyon:spin/") && import.ends_with("@2.0.0");
        assert!(
            wasi_0_2 || spin_2_0_0,
            "{import} is neither WASI 0.2 nor Spin 2.0.0"
        );
    }
    let spin: BTreeSet<String> = imports
        .iter()
        .filter(|name| name.starts_with("fermyon:"))
        .cloned()
        .collect();
    assert_eq!(spin, set(&SPIN_INTERFACES));
    // WASI by interface, whatever patch release the adapter targets: no sockets, no
    // outgoing HTTP, no terminals.
    let wasi: BTreeSet<String> = imports
        .iter()
        .filter_map(|name| name.strip_prefix("wasi:"))
        .map(|name| name.split('@').next().unwrap().to_string())
        .collect();
    assert_eq!(
        wasi,
        set(&[
            "cli/environment",
            "cli/exit",
            "cli/stderr",
            "cli/stdin",
            "cli/stdout",
            "clocks/monotonic-clock",
            "clocks/wall-clock",
            "filesystem/preopens",
            "filesystem/types",
            "http/types",
            "io/error",
            "io/poll",
            "io/streams",
            "random/random",
        ])
    );
    // The adapter used here targets a later WASI 0.2 patch release (wasmtime 48's), and
    // the module's own wasi:io@0.2.0 imports merge into it; a WASI 0.2 host links any
    // 0.2.x. wasi:http/types is the code's own and stays at 0.2.0.
    assert!(imports.contains("wasi:http/types@0.2.0"), "{imports:?}");
}
