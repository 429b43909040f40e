//! Fork bombs, for the hard denies: functions that (directly or through each other) call themselves in a forked
//! process, and loops that never end and start background jobs.

use std::collections::{HashMap, HashSet};

use super::shell_walk::Walked;
use super::shell_words::{Operator, Token, lex};

/// Whether `command`, as `walked`, is a fork bomb:
///
/// - a function that calls itself, directly or through other functions, where at least one call of the cycle runs
///   in a pipeline or in the background (`:(){ :|:& };:`, `a(){ b|b& }; b(){ a|a& }; a`, `f(){ { f; } & }`);
/// - a loop that never ends (`while :`, `while true`, `until false`, `for ((;;))`) whose body starts a
///   background job and does not `wait` (`while :; do sleep 9 & done`); the grammar cannot read `for ((;;))`,
///   so that one is also found in the text;
/// - the classic text `NAME(){ NAME|NAME& };NAME`, spaces ignored, even where the grammar cannot read it.
pub(super) fn is_fork_bomb(command: &str, walked: &Walked) -> bool {
    walked.forking_loops > 0
        || has_forking_recursion(walked)
        || is_classic_fork_bomb(command)
        || walked.unparsed.iter().map(String::as_str).chain([command]).any(is_endless_forking_arithmetic_for)
}

/// `for ((...; ;...)) do ... & done` read as text: an arithmetic `for` without a condition (or with a nonzero
/// literal one) followed by a background job and no `wait`.
fn is_endless_forking_arithmetic_for(text: &str) -> bool {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    compact.match_indices("for((").any(|(index, _)| {
        let header = compact.get(index + 5..).unwrap_or_default();
        let Some(end) = header.find("))") else { return false };
        let clauses: Vec<&str> = header.get(..end).unwrap_or_default().split(';').collect();
        let endless = match clauses.as_slice() {
            [_, condition, _] => {
                condition.is_empty()
                    || (condition.chars().all(|c| c.is_ascii_digit()) && condition.chars().any(|c| c != '0'))
            }
            _ => false,
        };
        // The body, as the lexer reads the original text after the header.
        let body = text.find("))").and_then(|position| text.get(position + 2..)).unwrap_or_default();
        let lexed = lex(body);
        let background = lexed.tokens.contains(&Token::Operator(Operator::Background));
        let waits = lexed.simple_commands().iter().any(|words| words.first().is_some_and(|word| word.text == "wait"));
        endless && background && !waits
    })
}

fn has_forking_recursion(walked: &Walked) -> bool {
    // caller -> callee, and the calls that fork.
    let mut calls: HashMap<&str, HashSet<&str>> = HashMap::new();
    let mut forking_calls: HashSet<(&str, &str)> = HashSet::new();
    for view in &walked.commands {
        let (Some(caller), Some(callee)) = (view.enclosing_function.as_deref(), view.words.first()) else { continue };
        let callee = callee.text.as_str();
        calls.entry(caller).or_default().insert(callee);
        if view.in_pipeline_or_background {
            forking_calls.insert((caller, callee));
        }
    }
    forking_calls.iter().any(|(caller, callee)| reaches(&calls, callee, caller))
}

/// Whether a chain of calls leads from `from` to `to` (or `from` is `to`).
fn reaches(calls: &HashMap<&str, HashSet<&str>>, from: &str, to: &str) -> bool {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut pending = vec![from];
    while let Some(function) = pending.pop() {
        if function == to {
            return true;
        }
        if seen.insert(function) {
            pending.extend(calls.get(function).into_iter().flatten().copied());
        }
    }
    false
}

/// `NAME(){ NAME|NAME& };NAME` for any function name, spaces ignored: the classic `:(){ :|:& };:`.
fn is_classic_fork_bomb(command: &str) -> bool {
    let compact: String = command.chars().filter(|c| !c.is_whitespace()).collect();
    compact.match_indices("(){").any(|(index, _)| {
        let before = compact.get(..index).unwrap_or_default();
        let name_start = before
            .rfind(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | ':' | '.' | '-')))
            .map_or(0, |position| position + 1);
        let name = before.get(name_start..).unwrap_or_default();
        let body = compact.get(index + 3..).unwrap_or_default();
        !name.is_empty()
            && (body.starts_with(&format!("{name}|{name}&}}")) || body.starts_with(&format!("{name}|{name}&;}}")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::shell_walk::walk;

    fn bomb(command: &str) -> bool {
        is_fork_bomb(command, &walk(command))
    }

    #[test]
    fn recursion_through_forks_and_endless_forking_loops_are_bombs() {
        for command in [
            ":(){ :|:& };:",
            "bomb() { bomb & bomb; }; bomb",
            "a(){ b|b& }; b(){ a|a& }; a",
            "a() { b; }; b() { c | c & }; c() { a; }; a",
            "f() { { f; } & }; f",
            "while :; do sleep 9 & done",
            "while true; do x & done",
            "until false; do x & done",
            "for ((;;)); do x & done",
            "while :; do (x) & done",
            "for ((;;)); do x & done",
            "for (( ; 1 ; )) do sleep 9 & done",
        ] {
            assert!(bomb(command), "{command}");
        }
        for command in [
            "f() { g | h; }; f",
            "f() { f; }; f",
            "a() { b; }; b() { a; }; a",
            "while read l; do echo $l; done < f",
            "while :; do ps aux | grep x; sleep 5; done",
            "while :; do x & wait; done",
            "for i in 1 2 3; do x & done",
            "sleep 9 &",
            "for ((i=0; i<3; i++)); do x & done",
            "for ((;;)); do x & wait; done",
        ] {
            assert!(!bomb(command), "{command}");
        }
    }
}
