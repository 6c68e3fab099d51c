//! The questions a contract asks, in System One request form: what `GET /v1/questions`
//! gives a recipient, so that it can send the contract's own text without copying it.
//!
//! Each question is the form the proxy sends upstream (`pinned_upstream`): its type, its
//! instructions, and its criteria with their descriptions (choice, noul) or level texts
//! (score). Sent back as a request's `questions`, unchanged, every one passes
//! [`check_request`](super::check_request) under the same contract: the text is the
//! contract's own, word for word. Nothing here depends on an answer.

use serde_json::{Map, Value};

use super::pinned_upstream;
use crate::contract::{Contract, View};

/// The questions `contract` allows, by id, each as the contract asks it upstream. A
/// question without an answer to give (`no_output`, which only the audit's derived
/// contracts hold) is not listed.
pub fn pinned(contract: &Contract) -> Map<String, Value> {
    contract
        .questions()
        .iter()
        .filter(|(_, rule)| rule.view() != View::NoOutput)
        .map(|(id, rule)| {
            let (upstream, _) = pinned_upstream(rule.question().kind, rule);
            (id.clone(), upstream.value.clone())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::pinned;
    use crate::config::Config;
    use crate::contract::{Contract, View};
    use crate::wire::{RequestError, check_request};

    fn contract(questions: &str) -> std::sync::Arc<Contract> {
        let text = format!(
            "[providers.p]\nkind = \"simulated\"\n[contracts.c]\nprovider = \"p\"\n{questions}"
        );
        Config::from_toml(&text).unwrap().contracts["c"].clone()
    }

    const QUESTIONS: &str = concat!(
        "[contracts.c.questions.cause]\nclasses = [\"B\", \"A\", \"C\"]\nview = \"choice\"\n",
        "instructions = \"Why?\"\ndescriptions = { A = \"a\", B = { text = \"b\" } }\n",
        "[contracts.c.questions.level]\nclasses = [\"0\", \"1\", \"2\"]\nview = \"full_native\"\n",
        "descriptions = { \"1\" = \"mid\" }\n",
        "[contracts.c.questions.urgent]\nclasses = [\"false\", \"true\"]\nview = \"choice\"\n",
        "instructions = \"Urgent?\"\n",
        "[contracts.c.questions.plain]\nclasses = [\"false\", \"true\"]\nview = \"choice\"\n",
        "descriptions = { true = \"yes\" }\n",
        "[contracts.c.questions.dent]\ntype = \"box\"\ninstructions = \"Where?\"\nview = \"full_native\"\n",
    );

    #[test]
    fn each_question_is_its_upstream_form_with_the_contracts_text() {
        let c = contract(QUESTIONS);
        let questions = pinned(&c);
        assert_eq!(
            Value::Object(questions),
            json!({
                "cause": {"type": "choice", "instructions": "Why?",
                          "criteria": {"B": {"text": "b"}, "A": "a", "C": null}},
                "level": {"type": "score", "criteria": ["0", "mid", "2"]},
                "urgent": {"type": "noul", "instructions": "Urgent?"},
                "plain": {"type": "noul", "criteria": {"false": null, "true": "yes"}},
                "dent": {"type": "box", "instructions": "Where?"},
            })
        );
    }

    #[test]
    fn sent_back_unchanged_they_pass_the_contracts_check() {
        let c = contract(QUESTIONS);
        let body = json!({"model": "m", "state": "s", "questions": pinned(&c)});
        let asked = check_request(&body, &c).unwrap();
        assert_eq!(asked.questions.len(), 5);
        // And the text goes upstream as the contract states it.
        assert_eq!(asked.upstream()["questions"], body["questions"]);
        // One word changed is refused: the listing is the contract's text, not a template.
        let mut changed = body.clone();
        changed["questions"]["cause"]["criteria"]["A"] = json!("another a");
        assert!(matches!(
            check_request(&changed, &c),
            Err(RequestError::TextMismatch { .. })
        ));
    }

    #[test]
    fn a_question_without_an_answer_to_give_is_not_listed() {
        let c = contract(QUESTIONS);
        let derived = c
            .derive(|id, _| crate::contract::Rerelease {
                view: (id == "urgent").then_some(View::NoOutput),
                mechanism: None,
            })
            .unwrap();
        let listed: Vec<String> = pinned(&derived).keys().cloned().collect();
        assert_eq!(listed, ["cause", "dent", "level", "plain"]);
    }
}
