//! A model's chat template (`tokenizer.chat_template`, Jinja) rendered with `minijinja` the way
//! llama.cpp renders it for `/v1/chat/completions` (`common/chat.cpp`,
//! `common_chat_template_direct_apply`):
//!
//! - blocks trim the newline after them and the whitespace before them on their line
//!   (`trim_blocks`, `lstrip_blocks`, as Hugging Face's `apply_chat_template` sets Jinja);
//! - the context is `messages` (a list of `{role, content}`), `bos_token`, `eos_token`,
//!   `enable_thinking` (true) and `add_generation_prompt`, which is left undefined when false;
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

/// `strftime_now(format)`: the local time now, formatted by C's `strftime` into at most 99 bytes
/// (llama.cpp's global of that name; Llama 3.1 templates print today's date with it).
fn strftime_now(format: String) -> std::result::Result<String, minijinja::Error> {
    let fail = |why: &str| {
        minijinja::Error::new(ErrorKind::InvalidOperation, format!("strftime_now: {why}"))
    };
    let fmt = std::ffi::CString::new(format).map_err(|_| fail("the format holds a NUL"))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| fail("the clock is before 1970"))?
        .as_secs() as libc::time_t;
    // SAFETY: `tm` is plain integers and a pointer that null makes valid; `localtime_r` writes it
    // from `now`, both living across the call.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    if unsafe { libc::localtime_r(&now, &mut tm) }.is_null() {
        return Err(fail("no local time"));
    }
    let mut buf = [0u8; 100];
    // SAFETY: `strftime` writes at most `buf.len()` bytes into `buf` and reads the NUL-terminated
    // `fmt` and the `tm` filled above.
    let n = unsafe { libc::strftime(buf.as_mut_ptr().cast(), buf.len(), fmt.as_ptr(), &tm) };
    if n == 0 {
        return Err(fail("failed to format time"));
    }
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
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
        env.add_template_owned(NAME, source.to_string())
            .map_err(|e| template_error("cannot parse it", &e))?;
        Ok(ChatTemplate {
            env,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            strip_bos: false,
            strip_eos: false,
        })
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
        let ctx = Context {
            messages: messages
                .iter()
                .map(|(role, content)| Message { role, content })
                .collect(),
            bos_token: &self.bos_token,
            eos_token: &self.eos_token,
            enable_thinking: true,
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
