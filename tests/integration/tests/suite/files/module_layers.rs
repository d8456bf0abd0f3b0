//! The modules of the component (`src/`) and of its decisions (`core/src/`) form layers:
//! no module (a file, or a folder as a whole) reaches, through `crate::` paths, a module
//! that reaches it back. Read from
//! the sources (`use crate::a::...`, `crate::a::f(...)`, `use crate::{a, b}`), so a new
//! circle fails here with its path.

use std::collections::{BTreeMap, BTreeSet};

use seckill_tests::drivers::app::repo_root;

/// The Rust files below `dir`, each with the module of the crate's root it is part of
/// (`handlers` for `handlers/orders.rs`): a folder is one module, as `crate::` paths name it.
fn files(dir: &std::path::Path, module: Option<&str>) -> Vec<(String, std::path::PathBuf)> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_string_lossy().to_string();
        let module = module.unwrap_or(&stem).to_string();
        if path.is_dir() {
            files.extend(self::files(&path, Some(&module)));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push((module, path));
        }
    }
    files
}

/// Module name -> the modules its files name through `crate::`, for the crate whose
/// sources are in `dir`.
fn dependencies(dir: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, path) in files(&repo_root().join(dir), None) {
        if name == "lib" {
            continue;
        }
        // The code, not what its comments mention.
        let text: String = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let uses = graph.entry(name.clone()).or_default();
        for (at, _) in text.match_indices("crate::") {
            let rest = &text[at + "crate::".len()..];
            let names: Vec<&str> = match rest.strip_prefix('{') {
                Some(group) => group[..group.find('}').unwrap()]
                    .split(',')
                    .map(|item| item.split("::").next().unwrap().trim())
                    .collect(),
                None => vec![rest
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .next()
                    .unwrap()],
            };
            uses.extend(
                names
                    .into_iter()
                    .filter(|n| !n.is_empty() && *n != name)
                    .map(str::to_string),
            );
        }
    }
    graph
}

/// A path from `from` back to itself, if there is one.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    let mut stack = vec![vec![from.to_string()]];
    let mut seen = BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = path.last().unwrap();
        for next in graph.get(last).into_iter().flatten() {
            if next == from {
                let mut found = path.clone();
                found.push(next.clone());
                return Some(found);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push(longer);
            }
        }
    }
    None
}

#[test]
fn no_module_reaches_back_to_itself() {
    for (dir, at_least) in [("src", 10), ("core/src", 6)] {
        let graph = dependencies(dir);
        assert!(
            graph.len() >= at_least,
            "read {} modules of {dir}",
            graph.len()
        );
        let circles: Vec<String> = graph
            .keys()
            .filter_map(|module| circle(&graph, module))
            .map(|path| path.join(" -> "))
            .collect();
        assert!(
            circles.is_empty(),
            "import circles in {dir}:\n{}",
            circles.join("\n")
        );
    }
}

#[test]
fn the_ids_are_at_the_bottom() {
    let core = dependencies("core/src");
    assert_eq!(core["ids"], BTreeSet::new());
    assert_eq!(core["order_id"], BTreeSet::from(["ids".to_string()]));
    assert_eq!(dependencies("src")["request_log"], BTreeSet::new());
}
