//! The ACL file (`--aclfile`): one `user <name> <rules...>` line per user, as Redis reads and
//! writes it (blank lines and `#` comments skipped; arguments split like redis.conf lines).

use std::path::Path;

use super::user::{User, valid_name};

/// Why a file was refused: Redis's texts, one per bad line, then its closing warning.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("Error loading ACLs, opening file '{path}': {error}")]
    Open { path: String, error: String },
    #[error("{0}WARNING: ACL errors detected, no change to the previously active ACL rules was performed")]
    Lines(String),
}

/// Parses an ACL file's text; `path` is for the error texts.
pub fn parse(path: &str, text: &str) -> Result<Vec<User>, FileError> {
    let mut errors = String::new();
    let mut users: Vec<User> = Vec::new();
    for (n, line) in text.split('\n').enumerate() {
        let n = n + 1;
        let line = line.trim_matches([' ', '\t', '\r', '\n']);
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some(words) = split_args(line) else {
            errors.push_str(&format!("{path}:{n}: unbalanced quotes in acl line. "));
            continue;
        };
        if words.len() < 2 || words[0] != "user" {
            errors.push_str(&format!("{path}:{n} should start with user keyword. "));
            continue;
        }
        let name = &words[1];
        if !valid_name(name) {
            errors.push_str(&format!("{path}:{n}: username '{name}' contains invalid characters. "));
            continue;
        }
        if users.iter().any(|u| u.name == *name) {
            errors.push_str(&format!("{path}:{n}: Duplicate user '{name}' found. "));
            continue;
        }
        let mut user = User::new(name);
        let mut ok = true;
        for rule in &words[2..] {
            if let Err(e) = user.apply(rule) {
                errors.push_str(&format!("{path}:{n}: {e}. "));
                ok = false;
                break;
            }
        }
        if ok {
            users.push(user);
        }
    }
    if errors.is_empty() { Ok(users) } else { Err(FileError::Lines(errors)) }
}

/// Reads and parses an ACL file.
pub fn read(path: &Path) -> Result<Vec<User>, FileError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| FileError::Open { path: shown.clone(), error: e.to_string() })?;
    parse(&shown, &text)
}

/// The file's text for these users (ACL SAVE).
pub fn render(users: &[std::sync::Arc<User>]) -> String {
    users.iter().map(|u| format!("user {} {}\n", u.name, u.describe())).collect()
}

/// Writes the file through a temporary file and a rename, so that a reader (another router
/// following the file) never sees half of it.
pub fn write(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// Splits a line into words like redis.conf lines (Redis's `sdssplitargs`, the same rules as
/// inline commands: [`crate::resp::parse::split_args`]). `None`: unbalanced quotes.
pub fn split_args(line: &str) -> Option<Vec<String>> {
    let words = crate::resp::parse::split_args(line.as_bytes())?;
    Some(words.iter().map(|w| String::from_utf8_lossy(w).into_owned()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_render_round_trip() {
        let text = "# users\n\nuser default on nopass ~* &* +@all\nuser alice on #f64551fcd6f07823cb87971cfb91446425da18286b3ab1ef935e0cbd7a69f68a ~k* resetchannels -@all +get\n";
        let users = parse("f", text).unwrap();
        assert_eq!(users.len(), 2);
        let arcs: Vec<_> = users.into_iter().map(std::sync::Arc::new).collect();
        assert_eq!(render(&arcs), text.trim_start_matches("# users\n\n"));
    }

    #[test]
    fn errors_name_the_line() {
        let err = parse("/x.acl", "user a on\nnope\nuser b +nosuch\nuser a off\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "/x.acl:2 should start with user keyword. /x.acl:3: Unknown command or category name in ACL. \
             /x.acl:4: Duplicate user 'a' found. WARNING: ACL errors detected, no change to the previously \
             active ACL rules was performed"
        );
        assert!(parse("f", "user \"a\n").is_err());
    }

    #[test]
    fn split_like_redis_conf() {
        assert_eq!(split_args("user  a \"b c\" 'd\\'e'").unwrap(), ["user", "a", "b c", "d'e"]);
        assert_eq!(split_args("\"\\x41\\n\"").unwrap(), ["A\n"]);
        assert!(split_args("\"open").is_none());
        assert!(split_args("\"a\"b").is_none());
    }
}
