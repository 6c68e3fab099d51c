//! Box answers: where an object is in the request's image. A box has no classes, so none
//! of the class-vector machinery applies: the view chooses whether the confidence goes
//! out, and the only mechanism, `quantize`, rounds the four edges (and the confidence) to
//! its step.
//!
//! | view | released |
//! |---|---|
//! | `full_native` | `box`, `confidence` (the provider's, or `null` when it sent none) |
//! | `choice` | `box`; the complete shape fills `confidence` with `null` |
//!
//! Every release is a valid box: edges in [0, 1], `top <= bottom`, `left <= right`
//! (rounding is monotone, so it keeps the order, and the result is clamped to [0, 1]).

use serde_json::{Map, Value};

use super::shape::fixed;
use crate::contract::{QuestionRule, Shape, View};
use crate::mechanism::Mechanism;
use crate::wire::{BoxAnswer, BoxEdges};

/// The released answer for a validated box answer.
pub fn release_box(rule: &QuestionRule, shape: Shape, native: &BoxAnswer) -> Value {
    let step = match rule.mechanism {
        Mechanism::Quantize { step, .. } => Some(step),
        _ => None,
    };
    let round = |x: f64| match step {
        Some(step) => quantize(x, step),
        None => x,
    };
    let BoxEdges {
        top,
        bottom,
        left,
        right,
    } = native.edges;
    let mut edges = Map::with_capacity(4);
    edges.insert("top".into(), Value::from(round(top)));
    edges.insert("bottom".into(), Value::from(round(bottom)));
    edges.insert("left".into(), Value::from(round(left)));
    edges.insert("right".into(), Value::from(round(right)));
    let mut out = Map::with_capacity(3);
    out.insert("type".into(), Value::String("box".into()));
    out.insert("box".into(), Value::Object(edges));
    let confidence = match rule.view {
        View::FullNative | View::ChoiceConfidence => native.confidence.map(round),
        _ => None,
    };
    match (confidence, shape) {
        (Some(confidence), _) => {
            out.insert("confidence".into(), Value::from(confidence));
        }
        // The clients require the field; `null` is what a provider without one sends.
        (None, Shape::Complete) => {
            out.insert("confidence".into(), Value::Null);
        }
        (None, Shape::Minimal) => {}
    }
    Value::Object(out)
}

/// `x` rounded to the nearest multiple of `step` (half away from zero), clamped to [0, 1],
/// in the fixed decimal form (no float noise goes out).
pub fn quantize(x: f64, step: f64) -> f64 {
    fixed(((x / step).round() * step).clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::parse_box;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn quantize_rounds_to_the_step_and_stays_in_the_unit_interval() {
        assert_eq!(quantize(0.123, 0.05), 0.1);
        assert_eq!(quantize(0.125, 0.05), 0.15);
        assert_eq!(quantize(0.3, 0.1), 0.3);
        assert_eq!(quantize(0.99, 0.4), 0.8);
        assert_eq!(quantize(1.0, 0.4), 1.0);
        assert_eq!(quantize(0.0, 0.25), 0.0);
    }

    #[test]
    fn provider_boxes_are_validated() {
        let good = json!({"type": "box", "box": {"top": 0.1, "bottom": 0.5, "left": 0.2, "right": 0.9}, "confidence": null});
        let parsed = parse_box(&good).unwrap();
        assert_eq!(parsed.confidence, None);
        assert_eq!(parsed.edges.right, 0.9);
        for bad in [
            json!({"type": "choice", "box": {"top": 0.1, "bottom": 0.5, "left": 0.2, "right": 0.9}}),
            json!({"type": "box"}),
            json!({"type": "box", "box": {"top": 0.1, "bottom": 0.5, "left": 0.2}}),
            json!({"type": "box", "box": {"top": 0.6, "bottom": 0.5, "left": 0.2, "right": 0.9}}),
            json!({"type": "box", "box": {"top": 0.1, "bottom": 0.5, "left": 0.95, "right": 0.9}}),
            json!({"type": "box", "box": {"top": -0.1, "bottom": 0.5, "left": 0.2, "right": 0.9}}),
            json!({"type": "box", "box": {"top": 0.1, "bottom": 1.5, "left": 0.2, "right": 0.9}}),
            json!({"type": "box", "box": {"top": "0.1", "bottom": 0.5, "left": 0.2, "right": 0.9}}),
            json!({"type": "box", "box": {"top": 0.1, "bottom": 0.5, "left": 0.2, "right": 0.9}, "confidence": 2}),
            json!({"type": "box", "box": [0.1, 0.5, 0.2, 0.9]}),
        ] {
            assert!(parse_box(&bad).is_err(), "{bad}");
        }
    }

    fn edges() -> impl Strategy<Value = BoxAnswer> {
        (
            0.0..=1.0f64,
            0.0..=1.0f64,
            0.0..=1.0f64,
            0.0..=1.0f64,
            proptest::option::of(0.0..=1.0f64),
        )
            .prop_map(|(a, b, c, d, confidence)| BoxAnswer {
                edges: BoxEdges {
                    top: a.min(b),
                    bottom: a.max(b),
                    left: c.min(d),
                    right: c.max(d),
                },
                confidence,
            })
    }

    proptest! {
        /// Whatever valid box comes in, what goes out is a valid box, on the step's grid
        /// when quantized, and reads back through the same validation.
        #[test]
        fn every_release_is_a_valid_box(native in edges(), step_index in 0usize..6) {
            let steps = [0.5, 0.25, 0.1, 0.05, 0.01, 0.3];
            let step = steps[step_index];
            let rule = test_rule(Mechanism::Quantize {
                step,
                confidence: crate::mechanism::ConfidenceSource::Derived,
            });
            let released = release_box(&rule, Shape::Complete, &native);
            let read = parse_box(&released).unwrap();
            for edge in [read.edges.top, read.edges.bottom, read.edges.left, read.edges.right] {
                prop_assert!((0.0..=1.0).contains(&edge));
                let k = edge / step;
                prop_assert!((k - k.round()).abs() < 1e-6 || edge == 1.0, "{edge} off the grid of {step}");
            }
            prop_assert!(read.edges.top <= read.edges.bottom && read.edges.left <= read.edges.right);
            let unchanged = release_box(&test_rule(Mechanism::None), Shape::Complete, &native);
            prop_assert_eq!(parse_box(&unchanged).unwrap(), native);
        }
    }

    fn test_rule(mechanism: Mechanism) -> QuestionRule {
        QuestionRule {
            classes: Vec::new(),
            plain_classes: true,
            question: crate::contract::Pinned {
                kind: crate::wire::Kind::Box,
                instructions: None,
                descriptions: Vec::new(),
                caller_text: false,
            },
            view: View::FullNative,
            coarsen: None,
            withhold: Vec::new(),
            mechanism,
            workflows: None,
            pinned_upstream: Default::default(),
            codewords: Default::default(),
        }
    }

    #[test]
    fn the_choice_view_drops_the_confidence_and_the_shape_decides_its_fill() {
        let native = BoxAnswer {
            edges: BoxEdges {
                top: 0.1,
                bottom: 0.2,
                left: 0.3,
                right: 0.4,
            },
            confidence: Some(0.87),
        };
        let mut rule = test_rule(Mechanism::None);
        assert_eq!(
            release_box(&rule, Shape::Complete, &native)["confidence"],
            0.87
        );
        rule.view = View::Choice;
        let complete = release_box(&rule, Shape::Complete, &native);
        assert_eq!(complete["confidence"], Value::Null);
        assert_eq!(complete["box"]["left"], 0.3);
        let minimal = release_box(&rule, Shape::Minimal, &native);
        assert!(minimal.get("confidence").is_none());
    }
}
