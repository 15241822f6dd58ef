//! The house rules a newcomer can rely on: no Rust file over 600 lines and no function over 150
//! (a function is measured from its `fn` line to the closing brace at the same indent, as rustfmt
//! lays it out), and no import loop between source files (issue 32). An exception must be listed
//! here with its reason.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 600;
const MAX_FN_LINES: usize = 150;

/// Functions allowed to be longer, each with why (path relative to the root, function name).
const LONG_FUNCTIONS: [(&str, &str, &str); 0] = [];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if !p.ends_with("target") {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The name and length in lines of every function with a body in `text`.
fn functions(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let indent = &l[..l.len() - t.len()];
        let t = ["pub(crate) ", "pub(super) ", "pub "]
            .iter()
            .find_map(|p| t.strip_prefix(p))
            .unwrap_or(t);
        let t = ["const ", "async ", "unsafe "]
            .iter()
            .fold(t, |t, p| t.strip_prefix(p).unwrap_or(t));
        let Some(rest) = t.strip_prefix("fn ") else {
            continue;
        };
        if l.trim_end().ends_with(';') {
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let close = format!("{indent}}}");
        if let Some(j) = lines[i + 1..].iter().position(|m| *m == close) {
            out.push((name, j + 2));
        }
    }
    out
}

#[test]
fn the_function_measure_counts_from_fn_to_its_brace() {
    let text = "fn a() {\n    x;\n}\n\n    pub(crate) async fn b(\n        y: u8,\n    ) {\n        z;\n    }\n";
    assert_eq!(
        functions(text),
        [("a".to_string(), 3), ("b".to_string(), 5)]
    );
}

#[test]
fn no_file_over_600_lines_and_no_function_over_150() {
    let root = repo();
    let mut files = Vec::new();
    for d in ["engine", "harness", "fuzz"] {
        rust_files(&root.join(d), &mut files);
    }
    assert!(files.len() > 100, "found only {} files", files.len());
    let mut over = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let rel = f.strip_prefix(&root).unwrap().display().to_string();
        let n = text.lines().count();
        if n > MAX_FILE_LINES {
            over.push(format!("{rel}: {n} lines"));
        }
        for (name, len) in functions(&text) {
            let allowed = LONG_FUNCTIONS
                .iter()
                .any(|(p, n, _)| *p == rel && *n == name);
            if len > MAX_FN_LINES && !allowed {
                over.push(format!("{rel}: fn {name}, {len} lines"));
            }
        }
    }
    assert!(over.is_empty(), "over the limits: {over:#?}");
}

// ---- No import loop between files ----------------------------------------------------------
//
// File A imports file B when A's code outside its tests (everything before the first
// `#[cfg(test)]`, comments left out) names a path into B's module: in a `use crate::…`,
// `use super::…` or `use self::…` (re-exports included), or inline as `crate::x::y`, `super::x` or
// `self::x`. The path goes to the file of its longest prefix that is a module (`a/b.rs` and
// `a/b/mod.rs` are module `a::b`, `lib.rs` the root). Paths relative to a module (`use b::X`
// after `mod b;`) and into other crates are not followed.

/// Loops allowed, each a group of files (relative to the repository) that may import one another.
const ALLOWED_LOOPS: [(&[&str], &str); 1] = [(
    &[
        "engine/src/kernels/int4/mod.rs",
        "engine/src/kernels/linear.rs",
        "engine/src/kernels/reference.rs",
    ],
    "kernels and their plain reference twin: `reference` computes each fast kernel's \
         product on its own types (`Int4View`, `Linear`) and the kernels hand their parity \
         tests that twin (`int4::matmul_reference`)",
)];

/// A file's imports: file -> the files it imports (both relative to the repository).
type Graph = BTreeMap<String, BTreeSet<String>>;

/// A file's module path: `a/b.rs` and `a/b/mod.rs` are `[a, b]`, `lib.rs` is `[]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let mut path: Vec<String> = file
        .strip_prefix(src)
        .unwrap()
        .with_extension("")
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    if matches!(path.last().map(String::as_str), Some("mod" | "lib")) {
        path.pop();
    }
    path
}

/// The code of a file outside its tests: comments dropped, everything from `#[cfg(test)]` on.
fn non_test_code(text: &str) -> String {
    let code: Vec<&str> = text
        .lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect();
    let code = code.join("\n");
    match code.find("#[cfg(test)]") {
        Some(i) => code[..i].to_string(),
        None => code,
    }
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Where `word` starts in `code` as a whole word.
fn word_starts<'a>(code: &'a str, word: &'a str) -> impl Iterator<Item = usize> + 'a {
    code.match_indices(word).map(|(i, _)| i).filter(move |&i| {
        let before = code[..i].chars().next_back();
        let after = code[i + word.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

/// A use tree without whitespace or renames: `a::{b as c, d}` is `a::{b,d}`.
fn compact(tree: &str) -> String {
    let mut out = String::new();
    let mut words = tree.split_whitespace();
    while let Some(w) = words.next() {
        if w == "as" {
            let alias = words.next().unwrap_or("");
            out.push_str(alias.trim_start_matches(is_ident));
        } else {
            out.push_str(w);
        }
    }
    out
}

/// The paths of a compact use tree: `a::{b, c::{d, e}}` is `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let (Some(open), true) = (tree.find('{'), tree.ends_with('}')) else {
        return vec![tree.to_string()];
    };
    let (prefix, inner) = (&tree[..open], &tree[open + 1..tree.len() - 1]);
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items
        .into_iter()
        .filter(|item| !item.is_empty())
        .flat_map(|item| expand(&format!("{prefix}{item}")))
        .collect()
}

/// The paths of every `use` item in `code`.
fn use_paths(code: &str) -> Vec<String> {
    word_starts(code, "use")
        .filter_map(|i| code[i + 3..].split_once(';').map(|(tree, _)| tree))
        .flat_map(|tree| expand(&compact(tree)))
        .collect()
}

/// Every path written `crate::…`, `super::…` or `self::…` in `code` (at least one segment on).
fn inline_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut end = 0;
    let mut starts: Vec<usize> = ["crate", "super", "self"]
        .iter()
        .flat_map(|w| word_starts(code, w))
        .collect();
    starts.sort_unstable();
    for i in starts {
        if i < end {
            continue; // inside the path found before (`super::super::x`)
        }
        let len = code[i..]
            .find(|c: char| !is_ident(c) && c != ':')
            .unwrap_or(code.len() - i);
        let path = code[i..i + len].trim_end_matches(':');
        if path.contains("::") {
            out.push(path.to_string());
            end = i + path.len();
        }
    }
    out
}

/// The module a path written in module `from` points into, when it is one of `modules`.
fn target<'m>(
    modules: &'m BTreeMap<Vec<String>, String>,
    from: &[String],
    path: &str,
) -> Option<&'m String> {
    let mut segments = path.split("::").filter(|s| !s.is_empty()).peekable();
    let mut full: Vec<String> = match segments.peek().copied() {
        Some("crate") => {
            segments.next();
            Vec::new()
        }
        Some("super" | "self") => from.to_vec(),
        _ => return None,
    };
    while let Some(&s @ ("super" | "self")) = segments.peek() {
        if s == "super" {
            full.pop();
        }
        segments.next();
    }
    full.extend(segments.map(str::to_string));
    (0..=full.len()).rev().find_map(|n| modules.get(&full[..n]))
}

/// The import graph of the crate whose sources are `src` (binaries under `src/bin` left out).
fn import_graph(root: &Path, src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.retain(|f| !f.starts_with(src.join("bin")));
    let name = |f: &Path| f.strip_prefix(root).unwrap().display().to_string();
    let modules: BTreeMap<Vec<String>, String> = files
        .iter()
        .map(|f| (module_path(src, f), name(f)))
        .collect();
    let mut graph = Graph::new();
    for f in &files {
        let code = non_test_code(&std::fs::read_to_string(f).unwrap());
        let from = module_path(src, f);
        let imports = graph.entry(name(f)).or_default();
        for path in use_paths(&code).into_iter().chain(inline_paths(&code)) {
            if let Some(to) = target(&modules, &from, &path) {
                imports.insert(to.clone());
            }
        }
        imports.remove(&name(f));
    }
    graph
}

/// Tarjan's strongly connected components, keeping those of more than one file.
struct Components<'g> {
    graph: &'g Graph,
    index: BTreeMap<&'g str, usize>,
    low: BTreeMap<&'g str, usize>,
    stack: Vec<&'g str>,
    on_stack: BTreeSet<&'g str>,
    found: Vec<Vec<String>>,
}

impl<'g> Components<'g> {
    fn visit(&mut self, v: &'g str) {
        let graph = self.graph;
        let i = self.index.len();
        self.index.insert(v, i);
        self.low.insert(v, i);
        self.stack.push(v);
        self.on_stack.insert(v);
        for w in graph.get(v).into_iter().flatten() {
            if !self.index.contains_key(w.as_str()) {
                self.visit(w);
                self.lower(v, self.low[w.as_str()]);
            } else if self.on_stack.contains(w.as_str()) {
                self.lower(v, self.index[w.as_str()]);
            }
        }
        if self.low[v] == i {
            self.pop_component(v);
        }
    }

    fn lower(&mut self, v: &'g str, to: usize) {
        let low = self.low.get_mut(v).unwrap();
        *low = (*low).min(to);
    }

    fn pop_component(&mut self, root: &str) {
        let mut component = Vec::new();
        loop {
            let w = self.stack.pop().unwrap();
            self.on_stack.remove(w);
            component.push(w.to_string());
            if w == root {
                break;
            }
        }
        if component.len() > 1 {
            component.sort();
            self.found.push(component);
        }
    }
}

/// The import loops of `graph`: each group of files that reach one another, sorted.
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    let mut c = Components {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !c.index.contains_key(v.as_str()) {
            c.visit(v);
        }
    }
    c.found.sort();
    c.found
}

fn allowed(cycle: &[String]) -> bool {
    ALLOWED_LOOPS
        .iter()
        .any(|(group, _)| cycle.iter().all(|f| group.contains(&f.as_str())))
}

/// A loop as its files, each with the files of the loop it imports.
fn describe(cycle: &[String], graph: &Graph) -> String {
    let mut s = String::from("import loop:");
    for f in cycle {
        let inside: Vec<&str> = graph[f]
            .iter()
            .filter(|t| cycle.contains(t))
            .map(String::as_str)
            .collect();
        s.push_str(&format!("\n  {f} -> {}", inside.join(", ")));
    }
    s
}

#[test]
fn imports_are_read_from_use_trees_and_inline_paths_outside_tests() {
    let text = "use super::{a::{self, X}, b as c};\n\
                pub use self::d;\n\
                // use crate::commented;\n\
                fn f() { crate::e::g(super::super::h::i) }\n\
                #[cfg(test)]\n\
                use crate::tested;\n";
    let code = non_test_code(text);
    assert_eq!(
        use_paths(&code),
        ["super::a::self", "super::a::X", "super::b", "self::d"]
    );
    assert_eq!(
        inline_paths(&code),
        ["self::d", "crate::e::g", "super::super::h::i"]
    );
    let modules: BTreeMap<Vec<String>, String> = [(vec![], "lib"), (vec!["h"], "h")]
        .into_iter()
        .map(|(m, f)| (m.into_iter().map(String::from).collect(), f.to_string()))
        .collect();
    let from = ["a".to_string(), "b".to_string()];
    assert_eq!(target(&modules, &from, "super::super::h::i").unwrap(), "h");
    assert_eq!(target(&modules, &from, "crate::x").unwrap(), "lib");
    assert_eq!(target(&modules, &from, "std::x"), None);
}

#[test]
fn loops_are_found_and_chains_are_not() {
    let edges = [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e")];
    let mut graph = Graph::new();
    for (from, to) in edges {
        graph
            .entry(from.to_string())
            .or_default()
            .insert(to.to_string());
    }
    assert_eq!(cycles(&graph), [["a", "b", "c"]]);
    graph.entry("e".into()).or_default().insert("d".into());
    assert_eq!(cycles(&graph), [vec!["a", "b", "c"], vec!["d", "e"]]);
}

#[test]
fn no_import_loop_between_files() {
    let root = repo();
    for (group, _) in ALLOWED_LOOPS {
        for f in group {
            assert!(
                root.join(f).exists(),
                "ALLOWED_LOOPS names {f}, which is gone"
            );
        }
    }
    let mut loops = Vec::new();
    for krate in ["engine", "harness", "schema", "fuzz"] {
        let graph = import_graph(&root, &root.join(krate).join("src"));
        assert!(!graph.is_empty(), "no sources under {krate}/src");
        for cycle in cycles(&graph) {
            if !allowed(&cycle) {
                loops.push(describe(&cycle, &graph));
            }
        }
    }
    assert!(
        loops.is_empty(),
        "files that import one another (move what they share into the lower-level file, or a \
         small file of its own):\n{}",
        loops.join("\n")
    );
}
