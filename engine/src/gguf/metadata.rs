//! Typed metadata lookups of a `Gguf`: a missing key or a value of the wrong type is an error that
//! names the key (and, for a wrong type, where the value is in the file and what it is). Integers
//! are accepted from any integer type whose value fits; floats from f32 or f64. The `opt_` forms
//! give `None` for an absent key and still refuse a wrong type.

use super::value::Value;
use super::Gguf;
use crate::error::Error;
use crate::Result;

impl Gguf {
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index
            .key(&self.metadata, key)
            .map(|i| &self.metadata[i].1)
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Result<&str> {
        self.str("general.architecture")
    }

    /// The value of `key` converted by `conv`, `None` when absent; an error when `conv` refuses it.
    fn typed<'a, T>(
        &'a self,
        key: &str,
        want: &str,
        conv: impl FnOnce(&'a Value) -> std::result::Result<T, String>,
    ) -> Result<Option<T>> {
        let Some(i) = self.index.key(&self.metadata, key) else {
            return Ok(None);
        };
        let v = &self.metadata[i].1;
        conv(v).map(Some).map_err(|why| Error::Gguf {
            path: self.path.clone(),
            offset: self.index.value_at.get(i).copied(),
            field: format!("metadata key {i} ({key})"),
            msg: format!("expected {want}, found {}{why}", v.describe()),
        })
    }

    fn required<T>(&self, key: &str, want: &str, v: Option<T>) -> Result<T> {
        v.ok_or_else(|| Error::Gguf {
            path: self.path.clone(),
            offset: None,
            field: format!("metadata key {key}"),
            msg: format!("missing (expected {want})"),
        })
    }

    fn int<T: TryFrom<i128>>(&self, key: &str, want: &str) -> Result<Option<T>> {
        self.typed(key, want, |v| v.as_int::<T>().ok_or_else(String::new))
    }

    pub fn u32(&self, key: &str) -> Result<u32> {
        self.required(key, "u32", self.opt_u32(key)?)
    }

    pub fn u64(&self, key: &str) -> Result<u64> {
        self.required(key, "u64", self.int(key, "u64")?)
    }

    pub fn usize(&self, key: &str) -> Result<usize> {
        self.required(key, "usize", self.opt_usize(key)?)
    }

    pub fn f32(&self, key: &str) -> Result<f32> {
        self.required(key, "f32", self.opt_f32(key)?)
    }

    pub fn bool(&self, key: &str) -> Result<bool> {
        self.required(key, "bool", self.opt_bool(key)?)
    }

    pub fn str(&self, key: &str) -> Result<&str> {
        let v = self.opt_str(key)?;
        self.required(key, "string", v)
    }

    pub fn opt_u32(&self, key: &str) -> Result<Option<u32>> {
        self.int(key, "u32")
    }

    pub fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        self.int(key, "usize")
    }

    pub fn opt_f32(&self, key: &str) -> Result<Option<f32>> {
        self.typed(key, "f32", |v| v.as_f32().ok_or_else(String::new))
    }

    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        self.typed(key, "bool", |v| match v {
            Value::Bool(b) => Ok(*b),
            _ => Err(String::new()),
        })
    }

    pub fn opt_str(&self, key: &str) -> Result<Option<&str>> {
        self.typed(key, "string", |v| v.as_str().ok_or_else(String::new))
    }

    /// An array of `want` elements, each converted by `conv`.
    fn array<'a, T>(
        &'a self,
        key: &str,
        want: &str,
        conv: impl Fn(&'a Value) -> Option<T>,
    ) -> Result<Vec<T>> {
        let v = self.typed(key, want, |v| {
            let a = v.as_array().ok_or_else(String::new)?;
            a.iter()
                .enumerate()
                .map(|(k, e)| conv(e).ok_or_else(|| format!(" (element {k} is {})", e.describe())))
                .collect()
        })?;
        self.required(key, want, v)
    }

    pub fn str_array(&self, key: &str) -> Result<Vec<&str>> {
        self.array(key, "an array of string", Value::as_str)
    }

    pub fn i32_array(&self, key: &str) -> Result<Vec<i32>> {
        self.array(key, "an array of i32", Value::as_int::<i32>)
    }

    pub fn f32_array(&self, key: &str) -> Result<Vec<f32>> {
        self.array(key, "an array of f32", Value::as_f32)
    }
}
