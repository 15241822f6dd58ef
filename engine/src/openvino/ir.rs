//! A small writer of OpenVINO IR (version 11 XML plus one weights buffer), enough for the graphs
//! of `graphs`: parameters, constants, single- and multi-output operations and results. Port dims
//! are left out (the reader infers every shape from the parameters and constants); port precisions,
//! which the reader requires, follow the element types: an operation's output has its
//! `destination_type` / `output_type` attribute's type, else its first input's.

use std::fmt::Write as _;

/// An output port of a layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Out {
    layer: usize,
    port: usize,
}

struct Layer {
    name: String,
    ty: &'static str,
    version: &'static str,
    data: Vec<(&'static str, String)>,
    inputs: usize,
    outputs: usize,
    /// tensor names of output ports (port index relative to the first output)
    names: Vec<(usize, String)>,
    /// element type of the outputs (`f32`, `u4`, ...)
    elem: String,
}

#[derive(Default)]
pub struct Graph {
    layers: Vec<Layer>,
    edges: Vec<(Out, usize, usize)>,
    weights: Vec<u8>,
}

/// The IR's port precision of an element type.
fn precision(elem: &str) -> String {
    match elem {
        "f32" => "FP32".into(),
        "f16" => "FP16".into(),
        e => e.to_uppercase(),
    }
}

/// Shape as IR writes it: `2,3`, with `?` for a dynamic dimension.
fn shape_text(dims: &[Option<usize>]) -> String {
    dims.iter()
        .map(|d| d.map_or("?".to_string(), |v| v.to_string()))
        .collect::<Vec<_>>()
        .join(",")
}

impl Graph {
    pub fn new() -> Graph {
        Graph::default()
    }

    fn push(&mut self, layer: Layer, inputs: &[Out]) -> usize {
        let id = self.layers.len();
        for (i, &from) in inputs.iter().enumerate() {
            self.edges.push((from, id, i));
        }
        self.layers.push(layer);
        id
    }

    /// An input named `name` of element type `elem` (`f32`, `i64`, ...); `None` dims are dynamic.
    pub fn parameter(&mut self, name: &str, elem: &str, dims: &[Option<usize>]) -> Out {
        let id = self.push(
            Layer {
                name: name.into(),
                ty: "Parameter",
                version: "opset1",
                data: vec![("shape", shape_text(dims)), ("element_type", elem.into())],
                inputs: 0,
                outputs: 1,
                names: vec![(0, name.into())],
                elem: elem.into(),
            },
            &[],
        );
        Out { layer: id, port: 0 }
    }

    /// A constant of element type `elem` and shape `dims` whose packed bytes are `bytes` (u4:
    /// two values a byte, the even element in the low nibble).
    pub fn constant(&mut self, elem: &str, dims: &[usize], bytes: &[u8]) -> Out {
        // 64-byte aligned offsets, so that OpenVINO may use the buffer in place
        while !self.weights.len().is_multiple_of(64) {
            self.weights.push(0);
        }
        let offset = self.weights.len();
        self.weights.extend_from_slice(bytes);
        let dims: Vec<Option<usize>> = dims.iter().map(|&d| Some(d)).collect();
        let name = format!("const{}", self.layers.len());
        let id = self.push(
            Layer {
                name,
                ty: "Const",
                version: "opset1",
                data: vec![
                    ("element_type", elem.into()),
                    ("shape", shape_text(&dims)),
                    ("offset", offset.to_string()),
                    ("size", bytes.len().to_string()),
                ],
                inputs: 0,
                outputs: 1,
                names: Vec::new(),
                elem: elem.into(),
            },
            &[],
        );
        Out { layer: id, port: 0 }
    }

    /// An i64 constant (shapes, axes, ids).
    pub fn ints(&mut self, values: &[i64]) -> Out {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.constant("i64", &[values.len()], &bytes)
    }

    /// An f32 constant of shape `dims`.
    pub fn floats(&mut self, dims: &[usize], values: &[f32]) -> Out {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.constant("f32", dims, &bytes)
    }

    /// A one-output operation `ty` of `version` with attributes `data`.
    pub fn op(
        &mut self,
        ty: &'static str,
        version: &'static str,
        data: &[(&'static str, &str)],
        inputs: &[Out],
    ) -> Out {
        self.op_n(ty, version, data, inputs, 1)[0]
    }

    /// An operation with `outputs` output ports.
    pub fn op_n(
        &mut self,
        ty: &'static str,
        version: &'static str,
        data: &[(&'static str, &str)],
        inputs: &[Out],
        outputs: usize,
    ) -> Vec<Out> {
        let name = format!("{}{}", ty.to_lowercase(), self.layers.len());
        let elem = data
            .iter()
            .find(|(k, _)| *k == "destination_type" || *k == "output_type")
            .map(|(_, v)| v.to_string())
            .or_else(|| inputs.first().map(|i| self.layers[i.layer].elem.clone()))
            .unwrap_or_else(|| "f32".into());
        let id = self.push(
            Layer {
                name,
                ty,
                version,
                data: data.iter().map(|&(k, v)| (k, v.to_string())).collect(),
                inputs: inputs.len(),
                outputs,
                names: Vec::new(),
                elem,
            },
            inputs,
        );
        (0..outputs)
            .map(|o| Out {
                layer: id,
                port: inputs.len() + o,
            })
            .collect()
    }

    /// Mark `out` as a model output named `name`.
    pub fn result(&mut self, out: Out, name: &str) {
        let first_out = self.layers[out.layer].inputs;
        self.layers[out.layer]
            .names
            .push((out.port - first_out, name.into()));
        self.push(
            Layer {
                name: format!("result_{name}"),
                ty: "Result",
                version: "opset1",
                data: Vec::new(),
                inputs: 1,
                outputs: 0,
                names: Vec::new(),
                elem: String::new(),
            },
            &[out],
        );
    }

    /// Element types of the parameters, in order (the inputs a run must bind).
    pub fn parameters(&self) -> Vec<String> {
        self.layers
            .iter()
            .filter(|l| l.ty == "Parameter")
            .map(|l| l.elem.clone())
            .collect()
    }

    pub fn weights(&self) -> &[u8] {
        &self.weights
    }

    /// The IR's XML text.
    pub fn xml(&self, name: &str) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "<?xml version=\"1.0\"?>\n<net name=\"{name}\" version=\"11\">"
        );
        s.push_str("<layers>\n");
        for (id, l) in self.layers.iter().enumerate() {
            let _ = write!(
                s,
                "<layer id=\"{id}\" name=\"{}\" type=\"{}\" version=\"{}\">",
                l.name, l.ty, l.version
            );
            if !l.data.is_empty() {
                s.push_str("<data");
                for (k, v) in &l.data {
                    let _ = write!(s, " {k}=\"{v}\"");
                }
                s.push_str("/>");
            }
            if l.inputs > 0 {
                s.push_str("<input>");
                for p in 0..l.inputs {
                    let _ = write!(s, "<port id=\"{p}\"/>");
                }
                s.push_str("</input>");
            }
            if l.outputs > 0 {
                s.push_str("<output>");
                let p = precision(&l.elem);
                for o in 0..l.outputs {
                    let port = l.inputs + o;
                    match l.names.iter().find(|(i, _)| *i == o) {
                        Some((_, n)) => {
                            let _ =
                                write!(s, "<port id=\"{port}\" precision=\"{p}\" names=\"{n}\"/>");
                        }
                        None => {
                            let _ = write!(s, "<port id=\"{port}\" precision=\"{p}\"/>");
                        }
                    }
                }
                s.push_str("</output>");
            }
            s.push_str("</layer>\n");
        }
        s.push_str("</layers>\n<edges>\n");
        for (from, to, to_port) in &self.edges {
            let _ = writeln!(
                s,
                "<edge from-layer=\"{}\" from-port=\"{}\" to-layer=\"{to}\" to-port=\"{to_port}\"/>",
                from.layer, from.port
            );
        }
        s.push_str("</edges>\n</net>\n");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edges_connect_output_ports_numbered_after_the_inputs() {
        let mut g = Graph::new();
        let x = g.parameter("x", "f32", &[None, Some(4)]);
        let w = g.floats(&[3, 4], &[0.0; 12]);
        let y = g.op("MatMul", "opset1", &[("transpose_b", "true")], &[x, w]);
        g.result(y, "y");
        let xml = g.xml("t");
        assert!(xml.contains("shape=\"?,4\""), "{xml}");
        assert!(
            xml.contains("<port id=\"2\" precision=\"FP32\" names=\"y\"/>"),
            "{xml}"
        );
        assert!(
            xml.contains("<edge from-layer=\"2\" from-port=\"2\" to-layer=\"3\" to-port=\"0\"/>")
        );
        assert_eq!(g.weights().len(), 48);
    }
}
