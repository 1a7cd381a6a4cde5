//! `{{slot}}` prompt templates: the one filler behind the repair prompts (merit-repair) and
//! the interact prompts (merit-interact-env's simulator, merit-interact's agent,
//! merit-interact-gen's requests).
//!
//! Written by hand because the templates only need named substitution. Filling is one pass
//! over the template: a value is copied as it is and never expanded, so text from a database,
//! a question or a model that happens to contain `{{…}}` cannot inject another slot. A slot
//! without a value stays visible as `{{name}}`, and the callers' tests check that no rendered
//! template keeps one, so a template and its caller cannot drift apart unnoticed.

/// Fills the `{{slot}}` placeholders of `template` with the values of `slots`, in one pass.
/// An unknown slot is left as it is; an unclosed `{{` and everything after it are copied.
pub fn fill(template: &str, slots: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + 256);
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[start..]);
            return out;
        };
        let name = &after[..end];
        match slots.iter().find(|(slot, _)| *slot == name) {
            Some((_, value)) => out.push_str(value),
            None => {
                out.push_str("{{");
                out.push_str(name);
                out.push_str("}}");
            }
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

/// The slot names `template` uses, in order of first appearance (for tests that check a
/// template against its documentation).
pub fn slots(template: &str) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else { break };
        if !names.contains(&&after[..end]) {
            names.push(&after[..end]);
        }
        rest = &after[end + 2..];
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_is_one_pass() {
        assert_eq!(
            fill("a {{x}} b", &[("x", "{{y}}"), ("y", "no")]),
            "a {{y}} b"
        );
        assert_eq!(fill("{{missing}}", &[]), "{{missing}}");
        assert_eq!(fill("open {{x", &[("x", "1")]), "open {{x");
        assert_eq!(fill("a {{x}} {{y}} {{", &[("x", "1")]), "a 1 {{y}} {{");
    }

    #[test]
    fn slots_are_listed_once_in_order() {
        assert_eq!(slots("{{b}} {{a}} {{b}} {{open"), ["b", "a"]);
        assert!(slots("no slots }} {{").is_empty());
    }
}
