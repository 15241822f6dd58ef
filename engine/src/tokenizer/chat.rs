//! A model's chat template (`tokenizer.chat_template`, Jinja) rendered with `minijinja` the way
//! llama.cpp renders it for `/v1/chat/completions` (`common/chat.cpp`,
//! `common_chat_template_direct_apply`):
//!
//! - blocks trim the newline after them and the whitespace before them on their line
//!   (`trim_blocks`, `lstrip_blocks`, as Hugging Face's `apply_chat_template` sets Jinja);
//! - the context is `messages` (a list of `{role, content}`; `developer` is `system` unless
//!   the template is gpt-oss's), `bos_token`, `eos_token`, `enable_thinking` (true),
//!   `date_string` and `datetime` (today, local time) and `add_generation_prompt`, which is left
//!   undefined when false;
//! - a template that leaves a system message out (llama.cpp probes it with one) gets its text
//!   joined to the next message's, after a newline;
//! - `{% generation %}` blocks (Hugging Face's training masks) render their body, and
//!   `undefined|length` is 0, as in Jinja;
//! - Python's string and dict methods (`.strip()`, `.startswith()`, `.items()`) come from
//!   `minijinja-contrib`'s `pycompat`; `raise_exception(msg)` fails the render with `msg`;
//!   `strftime_now(fmt)` is the local time by C's `strftime`, as in llama.cpp;
//! - when the tokenizer adds BOS (or EOS) itself, a rendered prompt that starts with the BOS text
//!   (ends with the EOS text) loses it, so the prompt holds one.
//!
//! Errors in a template (syntax, an unknown filter, `raise_exception`) are `Error::Tokenizer`
//! naming the line, never panics.

use minijinja::{Environment, ErrorKind, Value};
use serde::Serialize;

use crate::error::{Error, Result};

const NAME: &str = "chat_template";

/// A parsed chat template with the special-token texts it renders.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
    strip_bos: bool,
    strip_eos: bool,
    /// The template knows the `developer` role (gpt-oss); others get it as `system`.
    developer_role: bool,
    /// The template prints a system message; when it does not, a leading one joins the next.
    system_role: bool,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'a str,
    content: &'a str,
}

#[derive(Serialize)]
struct Context<'a> {
    messages: Vec<Message<'a>>,
    bos_token: &'a str,
    eos_token: &'a str,
    enable_thinking: bool,
    /// Today, local time, as llama.cpp gives it ("03 Dec 2026", "Dec 03 2026").
    date_string: String,
    datetime: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    add_generation_prompt: Option<bool>,
}

fn template_error(what: &str, e: &minijinja::Error) -> Error {
    let mut msg = format!("chat template: {what}");
    if let Some(line) = e.line() {
        msg.push_str(&format!(" (line {line})"));
    }
    msg.push_str(&format!(
        ": {}",
        e.detail().unwrap_or(&e.kind().to_string())
    ));
    Error::Tokenizer(msg)
}

/// `raise_exception(msg)`: the template refuses the conversation.
fn raise_exception(msg: String) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
}

/// `length` (and `count`) as Jinja has it: an undefined value has none (templates test
/// `tools|length` when no tools are given).
fn length(v: &Value) -> std::result::Result<usize, minijinja::Error> {
    if v.is_undefined() {
        Ok(0)
    } else {
        minijinja::filters::length(v)
    }
}

/// Hugging Face's `{% generation %}` and `{% endgeneration %}` (they mark the assistant's text
/// for training masks; minijinja knows no such block) as `{% if true %}` and `{% endif %}`, with
/// their whitespace control, so the body renders as in llama.cpp.
fn without_generation_blocks(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(at) = rest.find("{%") {
        out.push_str(&rest[..at]);
        let tag = &rest[at..];
        let Some(end) = tag.find("%}") else {
            break;
        };
        let inner = &tag[2..end];
        let body = inner.trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
        out.push_str("{%");
        match body {
            "generation" => out.push_str(&inner.replacen("generation", "if true", 1)),
            "endgeneration" => out.push_str(&inner.replacen("endgeneration", "endif", 1)),
            _ => out.push_str(inner),
        }
        out.push_str("%}");
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

/// The local time now by C's `strftime` `format`, at most 99 bytes.
fn local_time(format: &str) -> std::result::Result<String, String> {
    let fmt = std::ffi::CString::new(format).map_err(|_| "the format holds a NUL".to_string())?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| "the clock is before 1970".to_string())?
        .as_secs() as libc::time_t;
    // SAFETY: `tm` is plain integers and a pointer that null makes valid; `localtime_r` writes it
    // from `now`, both living across the call.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    if unsafe { libc::localtime_r(&now, &mut tm) }.is_null() {
        return Err("no local time".into());
    }
    let mut buf = [0u8; 100];
    // SAFETY: `strftime` writes at most `buf.len()` bytes into `buf` and reads the NUL-terminated
    // `fmt` and the `tm` filled above.
    let n = unsafe { libc::strftime(buf.as_mut_ptr().cast(), buf.len(), fmt.as_ptr(), &tm) };
    if n == 0 {
        return Err("failed to format time".into());
    }
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// `strftime_now(format)`: llama.cpp's global of that name (Llama 3.1 templates print today's
/// date with it).
fn strftime_now(format: String) -> std::result::Result<String, minijinja::Error> {
    local_time(&format).map_err(|why| {
        minijinja::Error::new(ErrorKind::InvalidOperation, format!("strftime_now: {why}"))
    })
}

impl ChatTemplate {
    /// Parse `source`; `bos_token` and `eos_token` are the texts the template may print.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<ChatTemplate> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        minijinja_contrib::add_to_environment(&mut env);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("length", length);
        env.add_filter("count", length);
        env.add_template_owned(NAME, without_generation_blocks(source))
            .map_err(|e| template_error("cannot parse it", &e))?;
        let mut t = ChatTemplate {
            env,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            strip_bos: false,
            strip_eos: false,
            developer_role: source.contains("<|channel|>"),
            system_role: true,
        };
        // llama.cpp's probe (`jinja/caps.cpp`): is a system message's text used?
        let probe = [("system", "System message"), ("user", "User message")]
            .map(|(r, c)| (r.to_string(), c.to_string()));
        t.system_role = t
            .render(&probe, true)
            .is_ok_and(|p| p.contains("System message"));
        Ok(t)
    }

    /// Strip a leading BOS text (trailing EOS text) from rendered prompts, for a tokenizer that
    /// adds the token itself (`TextTokenizer::add_bos`).
    pub fn strip_added(mut self, bos: bool, eos: bool) -> Self {
        self.strip_bos = bos && !self.bos_token.is_empty();
        self.strip_eos = eos && !self.eos_token.is_empty();
        self
    }

    /// The prompt text of `messages` (`(role, content)` pairs), with the assistant's opening when
    /// `add_generation_prompt`.
    pub fn render(
        &self,
        messages: &[(String, String)],
        add_generation_prompt: bool,
    ) -> Result<String> {
        let merged;
        let messages = match messages {
            [(r, sys), rest @ ..] if r == "system" && !self.system_role => {
                // As llama.cpp: the system text, a newline, then the next message's.
                merged = rest
                    .iter()
                    .enumerate()
                    .map(|(i, (role, c))| match i {
                        0 => (role.clone(), format!("{sys}\n{c}")),
                        _ => (role.clone(), c.clone()),
                    })
                    .collect::<Vec<_>>();
                &merged[..]
            }
            _ => messages,
        };
        let ctx = Context {
            messages: messages
                .iter()
                .map(|(role, content)| Message {
                    role: if role == "developer" && !self.developer_role {
                        "system"
                    } else {
                        role
                    },
                    content,
                })
                .collect(),
            bos_token: &self.bos_token,
            eos_token: &self.eos_token,
            enable_thinking: true,
            date_string: local_time("%d %b %Y").unwrap_or_default(),
            datetime: local_time("%b %d %Y").unwrap_or_default(),
            add_generation_prompt: add_generation_prompt.then_some(true),
        };
        let tmpl = self
            .env
            .get_template(NAME)
            .map_err(|e| template_error("cannot load it", &e))?;
        let mut out = tmpl
            .render(&ctx)
            .map_err(|e| template_error("cannot render the conversation", &e))?;
        if self.strip_bos && out.starts_with(&self.bos_token) {
            out.drain(..self.bos_token.len());
        }
        if self.strip_eos && out.ends_with(&self.eos_token) {
            out.truncate(out.len() - self.eos_token.len());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turns(t: &[(&str, &str)]) -> Vec<(String, String)> {
        t.iter()
            .map(|(r, c)| (r.to_string(), c.to_string()))
            .collect()
    }

    #[test]
    fn blocks_trim_and_python_methods_work() {
        let src = "  {% for m in messages %}\n{{ m.role | upper }}: {{ m.content.strip() }}\n  {% endfor %}{% if add_generation_prompt %}A:{% endif %}";
        let t = ChatTemplate::new(src, "<s>", "</s>").unwrap();
        let m = turns(&[("user", "  hi  "), ("assistant", "yo")]);
        assert_eq!(t.render(&m, true).unwrap(), "USER: hi\nASSISTANT: yo\nA:");
        assert_eq!(t.render(&m, false).unwrap(), "USER: hi\nASSISTANT: yo\n");
    }

    #[test]
    fn bos_is_stripped_when_the_tokenizer_adds_it() {
        let t = ChatTemplate::new(
            "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}",
            "<s>",
            "</s>",
        )
        .unwrap();
        let m = turns(&[("user", "x")]);
        assert_eq!(t.render(&m, false).unwrap(), "<s>x</s>");
        let t = t.strip_added(true, true);
        assert_eq!(t.render(&m, false).unwrap(), "x");
    }

    #[test]
    fn hugging_face_habits_render_as_in_llama_cpp() {
        // {% generation %} renders its body; undefined|length is 0.
        let t = ChatTemplate::new(
            "{%- for m in messages %}{%- generation -%} [{{ m.content }}] {%- endgeneration %}{% endfor %}{{ tools|length }}",
            "",
            "",
        )
        .unwrap();
        assert_eq!(
            t.render(&turns(&[("user", "a"), ("assistant", "b")]), false)
                .unwrap(),
            "[a][b]0"
        );
        // A template without a system role gets the system text joined to the next message.
        let t = ChatTemplate::new(
            "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system') }}{% endif %}<{{ m.role }}>{{ m.content }}{% endfor %}",
            "",
            "",
        )
        .unwrap();
        let m = turns(&[("system", "S"), ("user", "U"), ("assistant", "A")]);
        assert_eq!(t.render(&m, false).unwrap(), "<user>S\nU<assistant>A");
        // developer is system unless the template is gpt-oss's.
        let t = ChatTemplate::new("{{ messages[0].role }}", "", "").unwrap();
        assert_eq!(
            t.render(&turns(&[("developer", "x")]), false).unwrap(),
            "system"
        );
    }

    #[test]
    fn template_faults_are_errors() {
        let e = ChatTemplate::new("{% for m in messages %}", "", "")
            .err()
            .unwrap();
        assert!(e.to_string().contains("cannot parse"), "{e}");
        let t = ChatTemplate::new(
            "{% if messages[0].role != 'system' %}{{ raise_exception('system first') }}{% endif %}",
            "",
            "",
        )
        .unwrap();
        let e = t.render(&turns(&[("user", "x")]), true).unwrap_err();
        assert!(e.to_string().contains("system first"), "{e}");
        let t = ChatTemplate::new("{{ messages | nosuchfilter }}", "", "");
        let e = match t {
            Ok(t) => t.render(&turns(&[("user", "x")]), true).unwrap_err(),
            Err(e) => e,
        };
        assert!(e.to_string().contains("nosuchfilter"), "{e}");
    }
}
