//! The chat templates llama.cpp keeps for its own tests (`models/templates/*.jinja`, 70 models'
//! templates), each rendered by `ChatTemplate` and by llama-server started with it
//! (`--chat-template-file`, SmolLM2's BOS and EOS texts on both sides): three conversations, with
//! and without the generation prompt, must be identical, but for the templates named in
//! `DIFFERENT` with why.

use super::*;

use moefleet_engine::tokenizer::ChatTemplate;

/// Templates whose rendering differs from llama.cpp's, and why.
const DIFFERENT: &[(&str, &str)] = &[
    (
        "Apertus-8B-Instruct.jinja",
        "llama.cpp sets enable_thinking false when its parser finds no reasoning markers; here it \
         is always true",
    ),
    (
        "deepseek-ai-DeepSeek-V4-Flash-0731.jinja",
        "llama.cpp gives earlier assistant turns an empty reasoning text (<think></think>)",
    ),
    (
        "deepseek-ai-DeepSeek-V4.jinja",
        "llama.cpp gives earlier assistant turns an empty reasoning text (<think></think>)",
    ),
    (
        "fireworks-ai-llama-3-firefunction-v2.jinja",
        "it adds a string and an undefined value, which minijinja (and Jinja) refuse and \
         llama.cpp's engine allows",
    ),
];

#[test]
fn vendored_chat_templates_match_llama_server() {
    let (server, model) = match server_and_model() {
        Ok(p) => p,
        Err(why) => {
            return common::skip(
                "vendored_chat_templates_match_llama_server",
                "MOEFLEET_REQUIRE_LLAMA_SERVER",
                &why,
            )
        }
    };
    let dir = peer_cache().join(LLAMA_CPP).join("models/templates");
    let mut files: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(rd) => rd
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "jinja"))
            .collect(),
        Err(_) => {
            return common::skip(
                "vendored_chat_templates_match_llama_server",
                "MOEFLEET_REQUIRE_LLAMA_SERVER",
                &format!("{} is absent", dir.display()),
            )
        }
    };
    files.sort();
    let t0 = Instant::now();
    let http = reqwest::blocking::Client::new();
    let conversations: &[&[(&str, &str)]] = &[
        &[("user", "Hello")],
        &[("system", "You are terse."), ("user", "Hi there")],
        &[
            ("user", "What is 2+2?"),
            ("assistant", "4"),
            ("user", "And 3+3?"),
        ],
    ];
    let (mut same, mut total) = (0, 0);
    let mut differing: Vec<String> = Vec::new();
    let mut report = Vec::new();
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        let src = std::fs::read_to_string(f).unwrap();
        let ours = ChatTemplate::new(&src, "<|im_start|>", "<|im_end|>");
        let srv = LlamaServer::start(
            &server,
            &model,
            &["--chat-template-file", &f.display().to_string()],
        );
        let mut differs = false;
        for turns in conversations {
            let messages: Vec<(String, String)> = turns
                .iter()
                .map(|(r, c)| (r.to_string(), c.to_string()))
                .collect();
            let body: Vec<Value> = turns
                .iter()
                .map(|(r, c)| json!({"role": r, "content": c}))
                .collect();
            for add in [true, false] {
                total += 1;
                let theirs = srv.post(
                    &http,
                    "/apply-template",
                    json!({"messages": body, "add_generation_prompt": add}),
                );
                let rendered = match &ours {
                    Ok(t) => t.render(&messages, add).map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                };
                match (&rendered, theirs["prompt"].as_str()) {
                    (Ok(o), Some(p)) if o == p => same += 1,
                    _ => {
                        differs = true;
                        report.push(format!(
                            "{name}, {} messages, generation prompt {add}:\n  ours     {rendered:?}\n  llama.cpp {}",
                            turns.len(),
                            theirs["prompt"]
                        ));
                    }
                }
            }
        }
        if differs {
            differing.push(name);
        }
    }
    eprintln!(
        "vendored_chat_templates_match_llama_server: {} templates, {same}/{total} renderings \
         identical; differing as known: {}; {:.1} s",
        files.len(),
        differing.join(", "),
        t0.elapsed().as_secs_f64()
    );
    let known: Vec<String> = DIFFERENT.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(differing, known, "\n{}", report.join("\n"));
    assert!(files.len() >= 60);
}
