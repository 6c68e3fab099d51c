//! `GET /v1/models`: the provider's model list, re-emitted with only what the proxy can
//! vouch for.

use serde_json::{Value, json};

use releasegate_core::contract::Contract;
use releasegate_core::wire;

use super::reply::{count_rejected, reject, success_body, upstream_error};
use super::trail::{Trail, upstream_span};
use super::{Selection, select_contract};
use crate::server::AppState;
use crate::server::error::Error;
use crate::upstream::Reply;

/// The provider's model list, cut to what the proxy vouches for.
pub(super) async fn list_models(
    state: &AppState,
    selection: Selection<'_>,
    trail: &mut Trail,
) -> Result<Value, Error> {
    let live = state.live();
    let contract = select_contract(&live, selection, trail).await?;
    let called = trail.clock();
    let reply = live
        .upstreams
        .models(contract.provider(), trail.recipient.as_deref())
        .await
        .map_err(|error| upstream_error(&live, contract, error));
    upstream_span(state, trail, contract, "upstream models", called, &reply);
    let reply = reply?;
    let native = success_json(state, contract, reply)?;
    let entries = native
        .get("models")
        .and_then(Value::as_array)
        .ok_or_else(|| reject(state, contract, wire::Invalid::MissingField))?;
    // Re-emit only what the proxy can vouch for: a plain model id, a real calendar date
    // and the proxy's own description (the provider's free text never goes out). An entry
    // failing either check is dropped and counted; with a pinned model only its entry shows.
    let mut names = std::collections::BTreeSet::new();
    let mut models = Vec::new();
    for entry in entries {
        let field = |key: &str| entry.get(key).and_then(Value::as_str);
        let (Some(name), Some(release_date), Some(_)) =
            (field("name"), field("release_date"), field("description"))
        else {
            count_rejected(state, contract, wire::Invalid::BadModelEntry);
            continue;
        };
        if !wire::is_model_id(name) || !wire::is_calendar_date(release_date) {
            count_rejected(state, contract, wire::Invalid::BadModelEntry);
            continue;
        }
        let shown = contract.model().is_none_or(|pinned| pinned == name);
        if shown && names.insert(name) {
            models.push(json!({"name": name, "description": MODEL_DESCRIPTION, "release_date": release_date}));
        }
    }
    Ok(json!({"models": models}))
}

/// The description every listed model gets: the provider's own is free text, a channel
/// from the provider to recipients, and is never released.
const MODEL_DESCRIPTION: &str = "A System One decision model, served through releasegate.";

/// A 2xx answer's body as JSON; a body that is not JSON is a refused answer.
fn success_json(state: &AppState, contract: &Contract, reply: Reply) -> Result<Value, Error> {
    let bytes = success_body(reply)?;
    serde_json::from_slice(&bytes).map_err(|_| reject(state, contract, wire::Invalid::NotJson))
}
