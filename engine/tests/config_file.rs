//! `--config FILE`: `serve` runs from a TOML file whose keys are its flags, the command line wins,
//! `moefleet config --print` shows the resolved options as a file that reads back to the same
//! options, and a bad file is refused with a clear error naming the key.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::{Command, Output};

use common::server::Server;

fn moefleet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_moefleet"))
        .args(args)
        .env("MOEFLEET_LOG", "warn")
        .env_remove("MOEFLEET_API_KEY")
        .output()
        .unwrap()
}

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn serve_runs_from_a_config_file_and_the_command_line_wins() {
    let t = tempfile::tempdir().unwrap();
    // port 1 cannot be bound: the test's `--port 0` must win over it
    let cfg = write(
        t.path(),
        "serve.toml",
        "[model]\npreset = \"inkling-nano\"\ncontext = 256\n\n\
         [serve]\nroles = 2\nport = 1\napi_key = \"file-key\"\n",
    );
    let s = Server::start(&["--config", &cfg]);
    let c = reqwest::blocking::Client::new();
    let models = |key: Option<&str>| {
        let mut r = c.get(format!("{}/v1/models", s.url));
        if let Some(k) = key {
            r = r.bearer_auth(k);
        }
        r.send().unwrap()
    };
    // the file's API key is in force
    assert_eq!(models(None).status().as_u16(), 401);
    let r = models(Some("file-key"));
    assert_eq!(r.status().as_u16(), 200);
    let body: serde_json::Value = r.json().unwrap();
    assert_eq!(body["data"][0]["id"], "inkling-nano", "{body}");
    let stats: serde_json::Value = c
        .get(format!("{}/api/stats", s.url))
        .bearer_auth("file-key")
        .send()
        .unwrap()
        .json()
        .unwrap();
    // the file's `roles = 2`: role 0 and one local role process, and a pipeline group per role
    assert_eq!(stats["processes"].as_array().unwrap().len(), 2, "{stats}");
    assert_eq!(stats["pipeline_groups"], 2, "{stats}");
}

#[test]
fn config_print_resolves_the_file_under_the_command_line_and_reads_back() {
    let t = tempfile::tempdir().unwrap();
    let cfg = write(
        t.path(),
        "fleet.toml",
        "[model]\npreset = \"inkling-nano\"\nlink_stall_s = 2.5\n\n\
         [serve]\nslots = 8\nspeculate = true\nproposers = [\"suffix\", \"phrase\"]\n\n\
         [[role]]\nrank = 0\naddr = \"127.0.0.1:7100\"\n[[role]]\nrank = 1\naddr = \"127.0.0.1:7101\"\n",
    );
    let o = moefleet(&["config", "--print", "--config", &cfg, "--slots", "4"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let printed = String::from_utf8(o.stdout).unwrap();
    for line in [
        "preset = \"inkling-nano\"",
        "link-stall-s = 2.5",
        "slots = 4",
        "speculate = true",
        "proposers = [\"suffix\", \"phrase\"]",
        "# port = 8080 (default)",
        "# tokenizer =",
        "addr = \"127.0.0.1:7101\"",
    ] {
        assert!(
            printed.lines().any(|l| l == line),
            "no {line:?} in\n{printed}"
        );
    }
    // a file with [[role]] entries is the fleet file too
    assert!(printed.contains(&format!("fleet = \"{cfg}\"")), "{printed}");
    let back = write(t.path(), "printed.toml", &printed);
    let o = moefleet(&["config", "--print", "--config", &back]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8(o.stdout).unwrap(), printed);
    // a flag on the command line drops a key of the file it conflicts with, either way round
    let cfg = write(t.path(), "weights.toml", "[model]\nweights = \"dir\"\n");
    let o = moefleet(&["config", "--print", "--config", &cfg, "--model", "x.gguf"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let printed = String::from_utf8(o.stdout).unwrap();
    assert!(printed.contains("\nmodel = \"x.gguf\"\n"), "{printed}");
    assert!(printed.contains("\n# weights =\n"), "{printed}");
    // a flag's former name (`--window`, now `--prefill-rows`) is still a key, printed under the
    // name it has now, on the command line too
    let cfg = write(t.path(), "former.toml", "[serve]\nwindow = 4\n");
    let o = moefleet(&["config", "--print", "--config", &cfg]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let printed = String::from_utf8(o.stdout).unwrap();
    assert!(
        printed.lines().any(|l| l == "prefill-rows = 4"),
        "{printed}"
    );
    let o = moefleet(&["config", "--print", "--window", "16"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let printed = String::from_utf8(o.stdout).unwrap();
    assert!(
        printed.lines().any(|l| l == "prefill-rows = 16"),
        "{printed}"
    );
}

#[test]
fn a_bad_config_file_is_refused_naming_what_is_wrong() {
    let t = tempfile::tempdir().unwrap();
    for (text, want) in [
        ("[serve]\nbogus = 1\n", "[serve] has no key \"bogus\""),
        ("[model]\nslots = 1\n", "[model] has no key \"slots\""),
        ("slots = 1\n", "unknown key \"slots\" at the top"),
        (
            "[serve]\nslots = \"many\"\n",
            "invalid value 'many' for '--slots",
        ),
        ("[serve]\nspeculate = 1\n", "expected true or false"),
        ("[serve\n", "parsing the file as TOML"),
    ] {
        let cfg = write(t.path(), "bad.toml", text);
        let o = moefleet(&["serve", "--config", &cfg, "--port", "0"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{text}: {err}");
        assert!(err.contains(want), "{text}: {err}");
        assert!(!err.contains("panicked"), "{text}: {err}");
    }
    let o = moefleet(&["serve", "--config", "/nonexistent/x.toml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("reading the file"));
}
