//! Reading certificates back: each subject's [`Status`] against its file, and what changed.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{
    Certificate, Certification, Entry, FORMAT, Kind, MAX_FILE_BYTES, Mode, Status, Subject,
    release_sha256,
};

/// Checks every subject against its certificate in `dir`, read with `read` (a missing file is
/// `NotFound`), and looks for a certificate of each of `ungated`: one found is
/// [`Status::Ungated`]. Without the codebooks (`codebooks` false) a WCPQ release cannot be
/// described, so no subject is checked.
pub fn check(
    mode: Mode,
    dir: Option<PathBuf>,
    subjects: &[Subject],
    ungated: &[(Kind, String)],
    codebooks: bool,
    read: &dyn Fn(&Path) -> std::io::Result<Vec<u8>>,
) -> Certification {
    let mut entries: Vec<Entry> = subjects
        .iter()
        .map(|subject| Entry {
            kind: subject.kind,
            name: subject.name.clone(),
            status: match &dir {
                _ if !codebooks => Status::Unchecked,
                None => Status::Missing,
                Some(dir) => status_of(subject, dir, read),
            },
        })
        .collect();
    if let Some(dir) = &dir {
        for (kind, name) in ungated {
            let Some(file) = kind.file_name(name) else {
                continue;
            };
            match read(&dir.join(file)) {
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                _ => entries.push(Entry {
                    kind: *kind,
                    name: name.clone(),
                    status: Status::Ungated,
                }),
            }
        }
        entries.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    }
    Certification { mode, dir, entries }
}

fn status_of(
    subject: &Subject,
    dir: &Path,
    read: &dyn Fn(&Path) -> std::io::Result<Vec<u8>>,
) -> Status {
    let Some(file) = subject.kind.file_name(&subject.name) else {
        return Status::Invalid("its name cannot name a certificate file".to_string());
    };
    let path = dir.join(file);
    let bytes = match read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Status::Missing,
        Err(error) => return Status::Invalid(format!("cannot read {}: {error}", path.display())),
    };
    if bytes.len() > MAX_FILE_BYTES {
        return Status::Invalid(format!("{} is over {MAX_FILE_BYTES} bytes", path.display()));
    }
    match serde_json::from_slice::<Certificate>(&bytes) {
        Ok(certificate) => judge(subject, &certificate),
        Err(error) => Status::Invalid(format!("{} is not a certificate: {error}", path.display())),
    }
}

/// A certificate's status for `subject`.
pub fn judge(subject: &Subject, certificate: &Certificate) -> Status {
    if certificate.format != FORMAT {
        return Status::Invalid(format!(
            "format `{}`, expected `{FORMAT}`",
            certificate.format
        ));
    }
    if certificate.kind != subject.kind || certificate.name != subject.name {
        return Status::Invalid(format!(
            "it certifies {} {}",
            certificate.kind.as_str(),
            certificate.name
        ));
    }
    if certificate.gate.get("verdict").and_then(Value::as_str) != Some("pass") {
        return Status::Invalid("its gate verdict is not pass".to_string());
    }
    if release_sha256(&certificate.release) != certificate.release_sha256 {
        return Status::Invalid("its release does not hash to its release_sha256".to_string());
    }
    let mut changes = Vec::new();
    let legacy = subject.legacy_release_sha256.as_ref() == Some(&certificate.release_sha256);
    if certificate.release_sha256 != release_sha256(&subject.release) && !legacy {
        diff("", &certificate.release, &subject.release, &mut changes);
        if changes.is_empty() {
            changes.push("release_sha256".to_string());
        }
    }
    diff("policy", &certificate.policy, &subject.policy, &mut changes);
    if changes.is_empty() {
        Status::Certified
    } else {
        Status::Stale(changes)
    }
}

/// The fields where `old` and `new` differ, as `path: old -> new` (objects by key; other
/// values whole), after canonical comparison (`1` and `1.0` are the same).
fn diff(path: &str, old: &Value, new: &Value, out: &mut Vec<String>) {
    if crate::wire::same_json(old, new) {
        return;
    }
    let join = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let (x, y) = (
                    a.get(key).unwrap_or(&Value::Null),
                    b.get(key).unwrap_or(&Value::Null),
                );
                diff(&join(key), x, y, out);
            }
        }
        _ => out.push(format!(
            "{}: {} -> {}",
            if path.is_empty() { "release" } else { path },
            short(old),
            short(new)
        )),
    }
}

/// A value in at most 80 characters.
fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= 80 {
        return text;
    }
    let cut: String = text.chars().take(77).collect();
    format!("{cut}...")
}
