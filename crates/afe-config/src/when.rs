//! `when` conditions: CEL (crate `cel`), compiled at load time, and the variables each may use —
//! the flow's input by its Schema's name and the outputs of the nodes the node (transitively)
//! needs, each with `-` written `_`.

use std::collections::BTreeSet;

use cel::common::ast::{EntryExpr, Expr, IdedExpr};

/// The variables an expression reads and does not bind itself (a macro's loop variable, as in
/// `items.all(x, x > 0)`, is bound), or the parser's message.
pub fn free_variables(expression: &str) -> Result<BTreeSet<String>, String> {
    let program = cel::Program::compile(expression).map_err(|err| {
        err.to_string()
            .lines()
            .next()
            .unwrap_or("not valid CEL")
            .to_string()
    })?;
    let mut free = BTreeSet::new();
    collect(program.expression(), &mut Vec::new(), &mut free);
    Ok(free)
}

fn collect(expr: &IdedExpr, bound: &mut Vec<String>, free: &mut BTreeSet<String>) {
    match &expr.expr {
        Expr::Unspecified | Expr::Literal(_) => {}
        Expr::Ident(name) => {
            if !name.starts_with('@') && !bound.contains(name) {
                free.insert(name.clone());
            }
        }
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                collect(target, bound, free);
            }
            call.args.iter().for_each(|a| collect(a, bound, free));
        }
        Expr::Select(select) => collect(&select.operand, bound, free),
        Expr::List(list) => list.elements.iter().for_each(|e| collect(e, bound, free)),
        Expr::Map(map) => map.entries.iter().for_each(|e| entry(&e.expr, bound, free)),
        Expr::Struct(object) => object
            .entries
            .iter()
            .for_each(|e| entry(&e.expr, bound, free)),
        Expr::Comprehension(comprehension) => {
            collect(&comprehension.iter_range, bound, free);
            collect(&comprehension.accu_init, bound, free);
            let before = bound.len();
            bound.push(comprehension.iter_var.clone());
            bound.extend(comprehension.iter_var2.clone());
            bound.push(comprehension.accu_var.clone());
            collect(&comprehension.loop_cond, bound, free);
            collect(&comprehension.loop_step, bound, free);
            collect(&comprehension.result, bound, free);
            bound.truncate(before);
        }
    }
}

fn entry(entry: &EntryExpr, bound: &mut Vec<String>, free: &mut BTreeSet<String>) {
    match entry {
        EntryExpr::StructField(field) => collect(&field.value, bound, free),
        EntryExpr::MapEntry(pair) => {
            collect(&pair.key, bound, free);
            collect(&pair.value, bound, free);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(expression: &str) -> Vec<String> {
        free_variables(expression).unwrap().into_iter().collect()
    }

    #[test]
    fn free_variables_leave_out_what_macros_bind() {
        assert_eq!(vars("text_request.topic == 'k8s'"), ["text_request"]);
        assert_eq!(vars("plan.steps.all(s, size(s) > 0) && x"), ["plan", "x"]);
        assert_eq!(vars("{'a': b}[c] == [d]"), ["b", "c", "d"]);
        // Written with a dash, it is a subtraction of two variables.
        assert_eq!(vars("text-request.topic == 'k8s'"), ["request", "text"]);
    }

    #[test]
    fn syntax_errors_are_reported() {
        assert!(free_variables("a ==").is_err());
        assert!(free_variables("'unterminated").is_err());
    }
}
