//! What a listener serves: its axum router, and for the public listener a direct
//! path to the one route that carries nearly all traffic.
//!
//! `POST /v1/systemone` goes through the same steps as every other public route, in
//! the router's order (the sensitive-header marking, then the request id layer's
//! [`middleware::admit`] and [`middleware::stamp`]) and the same handler
//! ([`handlers::systemone_admitted`]: `handlers::systemone` given the layer's ids directly
//! rather than through the request's extensions); only the router's own dispatch and the
//! layers' services are skipped (its route table lookup, the boxed per-request clone of
//! the matched route, the response mapping futures, the handler's boxed future). Every
//! other method, path or route (including `/contracts/{contract}/v1/systemone`, a `HEAD`,
//! a trailing slash) goes to the router exactly as before, so 404s, 405s and path
//! extraction stay axum's.

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, header};
use axum::response::Response;
use bytes::Bytes;
use tower::ServiceExt;

use super::AppState;
use super::handlers;
use super::middleware;

/// The header values marked sensitive on every public request (never printed by
/// `Debug`, so never in a log line): the two ways a caller sends its key.
pub(super) fn sensitive_headers() -> [HeaderName; 2] {
    [
        header::AUTHORIZATION,
        HeaderName::from_static(crate::auth::API_KEY_HEADER),
    ]
}

/// A listener's routes: a router, and optionally the direct `POST /v1/systemone`.
#[derive(Clone)]
pub(super) struct Routes {
    router: Router,
    /// The state of the direct path (the public listener's), which runs the public
    /// router's layers' steps ([`mark_sensitive`], then [`middleware::admit`] and
    /// [`middleware::stamp`]) around [`handlers::systemone_admitted`], awaited in place: no
    /// service clone, no boxed future.
    systemone: Option<AppState>,
}

impl Routes {
    /// The public routes: `router` (which must serve `POST /v1/systemone` with
    /// [`handlers::systemone`] under the same layers) and the direct path to it.
    pub(super) fn public(router: Router, state: AppState) -> Routes {
        Routes {
            router,
            systemone: Some(state),
        }
    }

    /// Routes served by `router` alone (the admin listener).
    pub(super) fn router_only(router: Router) -> Routes {
        Routes {
            router,
            systemone: None,
        }
    }

    /// Whether these routes take `POST /v1/systemone` directly (the public listener's).
    pub(super) fn serves_systemone(&self) -> bool {
        self.systemone.is_some()
    }

    /// Serves one request.
    pub(super) async fn serve<B>(&self, request: hyper::Request<B>) -> Response
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        self.serve_lengths(request, true).await
    }

    /// [`Routes::serve`] for the plain path, whose writer gives a response without a
    /// `content-length` the one [`set_content_length`] would give, where it would put it
    /// (after the other fields; the plain path sets it first where its writer appends a
    /// `connection` field), so the bytes are the same without the field made and
    /// stored in the map.
    pub(super) async fn serve_plain<B>(&self, request: hyper::Request<B>) -> Response
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        self.serve_lengths(request, false).await
    }

    async fn serve_lengths<B>(&self, request: hyper::Request<B>, length: bool) -> Response
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        match &self.systemone {
            Some(state) if is_systemone(&request) => {
                let mut request = request.map(Body::new);
                // The router's layers in its order: the outermost first.
                mark_sensitive(request.headers_mut());
                let (id, mut response) = match middleware::admit(state, &mut request) {
                    Ok(ids) => {
                        let id = ids.request_id.clone();
                        (
                            id,
                            handlers::systemone_admitted(state.clone(), request, ids).await,
                        )
                    }
                    Err(refused) => *refused,
                };
                middleware::stamp(&id, &mut response);
                if length {
                    set_content_length(&mut response);
                }
                response
            }
            _ => match self.router.clone().oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            },
        }
    }
}

/// Whether the router would send `request` to `handlers::systemone`: exactly this
/// method and path (axum matches the path as sent, query aside).
fn is_systemone<B>(request: &hyper::Request<B>) -> bool {
    request.method() == Method::POST && request.uri().path() == "/v1/systemone"
}

/// A `content-length` for a body of known size, as the router's routes set one (hyper
/// would write the same header; setting it here keeps the two paths' responses equal).
pub(super) fn set_content_length(response: &mut Response) {
    if response.headers().contains_key(header::CONTENT_LENGTH) {
        return;
    }
    if let Some(size) = hyper::body::Body::size_hint(response.body()).exact() {
        response
            .headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    }
}

/// Marks the values of [`sensitive_headers`] sensitive, as the public router's
/// `SetSensitiveRequestHeadersLayer` does (every value of each name).
/// One pass over the request's few fields: a lookup per name (which reserves room and
/// hashes a custom name) cost more.
fn mark_sensitive(headers: &mut HeaderMap) {
    let names = sensitive_headers();
    for (name, value) in headers.iter_mut() {
        if names.contains(name) {
            value.set_sensitive(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use http_body_util::BodyExt;

    use super::Routes;
    use crate::server::{AppState, REQUEST_ID_HEADER, middleware::SDK_REQUEST_ID_HEADER, router};

    const KEY: &str = "routes-test-key";

    /// A request: method, URI, headers, body.
    type Case<'a> = (&'a str, &'a str, Vec<(&'a str, &'a str)>, &'a str);

    fn state() -> AppState {
        let key_sha256 = crate::auth::hash_key(KEY);
        let text = format!(
            "[providers.sim]\nkind = \"simulated\"\n\
             [[recipients]]\nname = \"r\"\nkey_sha256 = \"{key_sha256}\"\ncontracts = [\"c\", \"d\"]\n\
             [contracts.c]\nprovider = \"sim\"\n[contracts.c.questions.q]\nclasses = [\"A\", \"B\", \"C\"]\nview = \"full_native\"\n\
             [contracts.d]\nprovider = \"sim\"\n[contracts.d.questions.q]\nclasses = [\"A\", \"B\", \"C\"]\nview = \"choice\"\n"
        );
        AppState::prepare(crate::load::from_toml(&text).unwrap()).unwrap()
    }

    /// Status, headers (the request ids' values aside) and body of a response.
    async fn seen(
        routes: &Routes,
        request: Request<Body>,
    ) -> (StatusCode, Vec<(String, String)>, String) {
        let response = routes.serve(request).await;
        let status = response.status();
        let mut headers: Vec<(String, String)> = response
            .headers()
            .iter()
            .map(|(name, value)| {
                let value = if name == REQUEST_ID_HEADER || name == SDK_REQUEST_ID_HEADER {
                    "(an id)".to_string()
                } else {
                    String::from_utf8_lossy(value.as_bytes()).into_owned()
                };
                (name.to_string(), value)
            })
            .collect();
        headers.sort();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let body = String::from_utf8_lossy(&body).into_owned();
        (status, headers, body)
    }

    fn request(method: &str, uri: &str, headers: &[(&str, &str)], body: &str) -> Request<Body> {
        let mut builder = Request::builder().method(method).uri(uri);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(Body::from(body.to_string())).unwrap()
    }

    /// The direct path marks every value of both key headers sensitive (so no `Debug` of
    /// the request prints them), as the router's layer does, and no other header.
    #[test]
    fn every_key_value_is_marked_sensitive() {
        let mut headers = axum::http::HeaderMap::new();
        headers.append("authorization", "Bearer a".parse().unwrap());
        headers.append("authorization", "Bearer b".parse().unwrap());
        headers.append(crate::auth::API_KEY_HEADER, "k".parse().unwrap());
        headers.append("x-release-contract", "c".parse().unwrap());
        super::mark_sensitive(&mut headers);
        for (name, value) in &headers {
            let key = name == "authorization" || name == crate::auth::API_KEY_HEADER;
            assert_eq!(value.is_sensitive(), key, "{name}");
        }
        assert_eq!(headers.len(), 4);
    }

    /// The direct path answers exactly what the router answers, for the requests it takes
    /// and for those it leaves to the router.
    #[tokio::test]
    async fn the_direct_path_answers_as_the_router_does() {
        let state = state();
        let direct = Routes::public(router(state.clone()), state.clone());
        let routed = Routes::router_only(router(state));
        let bearer = format!("Bearer {KEY}");
        let json = "application/json";
        let body = r#"{"model":"jev-latest","state":{"note":"late"},"questions":{"q":{"type":"choice","criteria":{"A":null,"B":null,"C":null}}}}"#;
        let long = "x".repeat(70_000);
        let cases: Vec<Case> = vec![
            (
                "POST",
                "/v1/systemone",
                vec![
                    ("authorization", &bearer),
                    ("content-type", json),
                    ("x-release-contract", "c"),
                ],
                body,
            ),
            (
                "POST",
                "/v1/systemone?x=1",
                vec![
                    ("authorization", &bearer),
                    ("content-type", json),
                    ("x-release-contract", "d"),
                ],
                body,
            ),
            (
                "POST",
                "/v1/systemone",
                vec![
                    ("x-api-key", KEY),
                    ("content-type", json),
                    ("x-release-contract", "d"),
                ],
                body,
            ),
            (
                "POST",
                "/v1/systemone",
                vec![
                    ("authorization", &bearer),
                    ("content-type", json),
                    ("x-release-contract", "nope"),
                ],
                body,
            ),
            ("POST", "/v1/systemone", vec![("content-type", json)], body),
            (
                "POST",
                "/v1/systemone",
                vec![("authorization", "Bearer wrong"), ("content-type", json)],
                body,
            ),
            (
                "POST",
                "/v1/systemone",
                vec![("authorization", &bearer), ("content-type", json)],
                "{not json",
            ),
            (
                "POST",
                "/v1/systemone",
                vec![("authorization", &bearer), ("content-type", "text/plain")],
                body,
            ),
            (
                "POST",
                "/v1/systemone",
                vec![
                    ("authorization", &bearer),
                    ("content-type", json),
                    ("x-filler", &long),
                ],
                body,
            ),
            (
                "POST",
                "/v1/systemone/",
                vec![("authorization", &bearer), ("content-type", json)],
                body,
            ),
            ("GET", "/v1/systemone", vec![("authorization", &bearer)], ""),
            (
                "PUT",
                "/v1/systemone",
                vec![("authorization", &bearer), ("content-type", json)],
                body,
            ),
            (
                "POST",
                "/contracts/d/v1/systemone",
                vec![("authorization", &bearer), ("content-type", json)],
                body,
            ),
            ("GET", "/v1/models", vec![("authorization", &bearer)], ""),
            (
                "GET",
                "/contracts/d/v1/questions",
                vec![("authorization", &bearer)],
                "",
            ),
        ];
        let mut statuses = Vec::new();
        for (method, uri, headers, body) in &cases {
            let a = seen(&direct, request(method, uri, headers, body)).await;
            let b = seen(&routed, request(method, uri, headers, body)).await;
            assert_eq!(a, b, "{method} {uri} {headers:?}");
            statuses.push(a.0.as_u16());
        }
        // The cases reach what they are meant to: answers, and refusals from the layers,
        // the handler and the router.
        assert_eq!(
            statuses,
            [
                200, 200, 200, 403, 403, 401, 400, 400, 431, 404, 405, 405, 200, 400, 200
            ]
        );
        // The first nine take the direct path, the rest the router.
        let direct_taken: Vec<bool> = cases
            .iter()
            .map(|(method, uri, headers, body)| {
                super::is_systemone(&request(method, uri, headers, body))
            })
            .collect();
        assert_eq!(direct_taken, [[true; 9].as_slice(), &[false; 6]].concat());
    }
}
