//! GGUF metadata values: the thirteen value types with their ids and least encoded sizes, and the
//! conversions the typed getters make (an integer of any type that fits; f32 or f64). Reading and
//! writing them is `parse` and `write`.

use std::fmt;

/// A metadata value as the file holds it. An array holds values of one type (arrays of arrays
/// included, each inner array with its own element type); an empty array keeps no element type.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    Str(String),
    Array(Vec<Value>),
}

/// A GGUF value type, by its id in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    Str = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    pub const ALL: [ValueType; 13] = [
        ValueType::U8,
        ValueType::I8,
        ValueType::U16,
        ValueType::I16,
        ValueType::U32,
        ValueType::I32,
        ValueType::F32,
        ValueType::Bool,
        ValueType::Str,
        ValueType::Array,
        ValueType::U64,
        ValueType::I64,
        ValueType::F64,
    ];

    pub fn from_id(id: u32) -> Option<ValueType> {
        Self::ALL.get(id as usize).copied()
    }

    pub fn id(self) -> u32 {
        self as u32
    }

    pub fn name(self) -> &'static str {
        match self {
            ValueType::U8 => "u8",
            ValueType::I8 => "i8",
            ValueType::U16 => "u16",
            ValueType::I16 => "i16",
            ValueType::U32 => "u32",
            ValueType::I32 => "i32",
            ValueType::F32 => "f32",
            ValueType::Bool => "bool",
            ValueType::Str => "string",
            ValueType::Array => "array",
            ValueType::U64 => "u64",
            ValueType::I64 => "i64",
            ValueType::F64 => "f64",
        }
    }

    /// The fewest bytes a value of this type takes in a file: its width; a string's u64 length;
    /// an array's u32 element type and u64 count. A declared count of `n` elements needs at least
    /// `n * min_bytes` bytes, which is checked before anything is allocated for them.
    pub fn min_bytes(self) -> usize {
        match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => 1,
            ValueType::U16 | ValueType::I16 => 2,
            ValueType::U32 | ValueType::I32 | ValueType::F32 => 4,
            ValueType::U64 | ValueType::I64 | ValueType::F64 | ValueType::Str => 8,
            ValueType::Array => 12,
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Value {
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F32(_) => ValueType::F32,
            Value::F64(_) => ValueType::F64,
            Value::Bool(_) => ValueType::Bool,
            Value::Str(_) => ValueType::Str,
            Value::Array(_) => ValueType::Array,
        }
    }

    /// An integer of any type, widened; `None` for anything else.
    pub fn as_i128(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// An integer of any type whose value fits `T`.
    pub fn as_int<T: TryFrom<i128>>(&self) -> Option<T> {
        self.as_i128().and_then(|v| T::try_from(v).ok())
    }

    /// An f32, or an f64 rounded to f32.
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            Value::F32(v) => Some(v),
            Value::F64(v) => Some(v as f32),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(v) => Some(v),
            _ => None,
        }
    }

    /// The element type of a non-empty array (its first element's).
    pub fn element_type(&self) -> Option<ValueType> {
        self.as_array()?.first().map(Value::value_type)
    }

    /// What this is, for an error: `u32 7`, `string of 5 bytes`, `array of 49152 string`.
    pub fn describe(&self) -> String {
        match self {
            Value::Str(s) => format!("string of {} bytes", s.len()),
            Value::Array(v) => match v.first() {
                Some(e) => format!("array of {} {}", v.len(), e.value_type()),
                None => "empty array".to_string(),
            },
            Value::Bool(b) => format!("bool {b}"),
            Value::F32(x) => format!("f32 {x}"),
            Value::F64(x) => format!("f64 {x}"),
            v => format!("{} {}", v.value_type(), v.as_i128().unwrap_or_default()),
        }
    }

    /// Equal, floats compared by their bits (so a NaN equals itself): what a round trip keeps.
    pub fn same_bits(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::F32(a), Value::F32(b)) => a.to_bits() == b.to_bits(),
            (Value::F64(a), Value::F64(b)) => a.to_bits() == b.to_bits(),
            (Value::Array(a), Value::Array(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same_bits(y))
            }
            (a, b) => a == b,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_ids_round_trip_and_integers_convert_when_they_fit() {
        for (i, t) in ValueType::ALL.iter().enumerate() {
            assert_eq!(t.id(), i as u32);
            assert_eq!(ValueType::from_id(i as u32), Some(*t));
        }
        assert_eq!(ValueType::from_id(13), None);
        assert_eq!(Value::I32(7).as_int::<u32>(), Some(7));
        assert_eq!(Value::I32(-7).as_int::<u32>(), None);
        assert_eq!(Value::U64(1 << 40).as_int::<u32>(), None);
        assert_eq!(Value::U8(3).as_int::<usize>(), Some(3));
        assert_eq!(Value::F32(1.0).as_int::<u32>(), None);
        assert_eq!(Value::F64(0.5).as_f32(), Some(0.5));
        assert_eq!(Value::I32(-5).describe(), "i32 -5");
        assert_eq!(
            Value::Array(vec![Value::Str("a".into())]).describe(),
            "array of 1 string"
        );
        assert!(Value::F32(f32::NAN).same_bits(&Value::F32(f32::NAN)));
    }
}
