#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use super::*;

fn ok(expr: &str) -> f64 {
    match evaluate(expr) {
        Ok(value) => value,
        Err(error) => panic!("`{expr}` failed: {error}"),
    }
}

fn err(expr: &str) -> CalcError {
    match evaluate(expr) {
        Ok(value) => panic!("`{expr}` evaluated to {value}, expected an error"),
        Err(error) => error,
    }
}

#[test]
fn numbers() {
    assert_eq!(ok("42"), 42.0);
    assert_eq!(ok("3.25"), 3.25);
    assert_eq!(ok(".5"), 0.5);
    assert_eq!(ok("5."), 5.0);
    assert_eq!(ok("1e3"), 1000.0);
    assert_eq!(ok("2.5E-2"), 0.025);
    assert_eq!(ok("1e+2"), 100.0);
    assert_eq!(ok("  7\t\n"), 7.0);
}

#[test]
fn precedence() {
    assert_eq!(ok("19 - 4"), 15.0);
    assert_eq!(ok("1 + 2 * 3"), 7.0);
    assert_eq!(ok("(1 + 2) * 3"), 9.0);
    assert_eq!(ok("2 * 3 ^ 2"), 18.0);
    assert_eq!(ok("10 - 4 % 3"), 9.0);
    assert_eq!(ok("1 + 6 / 3 * 2"), 5.0);
}

#[test]
fn associativity() {
    assert_eq!(ok("10 - 4 - 3"), 3.0);
    assert_eq!(ok("64 / 4 / 2"), 8.0);
    assert_eq!(ok("100 % 7 % 3"), 2.0);
    assert_eq!(ok("2 ^ 3 ^ 2"), 512.0);
}

#[test]
fn signs() {
    assert_eq!(ok("-2^2"), -4.0);
    assert_eq!(ok("(-2)^2"), 4.0);
    assert_eq!(ok("2^-1"), 0.5);
    assert_eq!(ok("2^-2^2"), 0.0625);
    assert_eq!(ok("--3"), 3.0);
    assert_eq!(ok("+-+3"), -3.0);
    assert_eq!(ok("4 - -2"), 6.0);
    assert_eq!(ok("2 * -3"), -6.0);
    assert_eq!(ok("-7 % 3"), -1.0);
}

#[test]
fn constants_and_functions() {
    assert_eq!(ok("pi"), std::f64::consts::PI);
    assert_eq!(ok("e"), std::f64::consts::E);
    assert_eq!(ok("sqrt(16) + abs(-2)"), 6.0);
    assert_eq!(ok("ln(e)"), 1.0);
    assert_eq!(ok("log10(1000)"), 3.0);
    assert_eq!(ok("log2(8)"), 3.0);
    assert_eq!(ok("exp(0)"), 1.0);
    assert!((ok("sin(pi / 2)") - 1.0).abs() < 1e-12);
    assert!((ok("cos(pi)") + 1.0).abs() < 1e-12);
    assert!(ok("tan(0)").abs() < 1e-12);
    assert!((ok("asin(1) * 2") - std::f64::consts::PI).abs() < 1e-12);
    assert!((ok("acos(-1)") - std::f64::consts::PI).abs() < 1e-12);
    assert!((ok("atan(1) * 4") - std::f64::consts::PI).abs() < 1e-12);
    assert_eq!(ok("floor(-2.5) + ceil(2.1) + round(2.5)"), 3.0);
    assert_eq!(ok("min(3, 1, 2)"), 1.0);
    assert_eq!(ok("max(3)"), 3.0);
    assert_eq!(ok("max(1, 2 + 5, 3)"), 7.0);
    assert_eq!(ok("pow(2, 10)"), 1024.0);
    assert_eq!(ok("sqrt(sqrt(256))"), 4.0);
}

#[test]
fn syntax_errors_name_their_position() {
    assert_eq!(
        err("2 # 3"),
        CalcError::UnexpectedCharacter {
            found: '#',
            position: 2
        }
    );
    assert_eq!(
        err("1_000"),
        CalcError::UnexpectedCharacter {
            found: '_',
            position: 1
        }
    );
    assert_eq!(
        err("2 * é"),
        CalcError::UnexpectedCharacter {
            found: 'é',
            position: 4
        }
    );
    assert_eq!(
        err("2 *"),
        CalcError::UnexpectedEnd {
            expected: "a number, a name or `(`",
            position: 3
        }
    );
    assert_eq!(
        err("-"),
        CalcError::UnexpectedEnd {
            expected: "a number, a name or `(`",
            position: 1
        }
    );
    assert_eq!(
        err("1 2"),
        CalcError::UnexpectedToken {
            found: "2".into(),
            expected: "an operator or the end of the expression",
            position: 2
        }
    );
    assert_eq!(
        err("2pi"),
        CalcError::UnexpectedToken {
            found: "pi".into(),
            expected: "an operator or the end of the expression",
            position: 1
        }
    );
    assert_eq!(
        err("3 * / 4"),
        CalcError::UnexpectedToken {
            found: "/".into(),
            expected: "a number, a name or `(`",
            position: 4
        }
    );
    assert_eq!(
        err("1e"),
        CalcError::InvalidNumber {
            text: "1e".into(),
            position: 0
        }
    );
    assert_eq!(
        err("3 + 2e-"),
        CalcError::InvalidNumber {
            text: "2e-".into(),
            position: 4
        }
    );
    assert_eq!(err(""), CalcError::Empty);
    assert_eq!(err("  "), CalcError::Empty);
    assert_eq!(
        err("2 ** 3"),
        CalcError::UnexpectedToken {
            found: "*".into(),
            expected: "a number, a name or `(`",
            position: 3
        }
    );
}

#[test]
fn unbalanced_parentheses() {
    assert_eq!(
        err("(1 + (2 * 3)"),
        CalcError::UnclosedParenthesis { position: 0 }
    );
    assert_eq!(
        err("1 + 2)"),
        CalcError::UnmatchedParenthesis { position: 5 }
    );
    assert_eq!(
        err("max(1, 2"),
        CalcError::UnclosedParenthesis { position: 3 }
    );
    assert_eq!(
        err("(1 2)"),
        CalcError::UnexpectedToken {
            found: "2".into(),
            expected: "an operator or `)`",
            position: 3
        }
    );
    assert_eq!(
        err("()"),
        CalcError::UnexpectedToken {
            found: ")".into(),
            expected: "a number, a name or `(`",
            position: 1
        }
    );
}

#[test]
fn names_and_calls() {
    let unknown = err("2 * tau");
    assert_eq!(
        unknown,
        CalcError::UnknownName {
            name: "tau".into(),
            position: 4
        }
    );
    assert!(unknown.to_string().contains("sqrt"), "{unknown}");
    assert_eq!(
        err("PI"),
        CalcError::UnknownName {
            name: "PI".into(),
            position: 0
        }
    );
    assert_eq!(
        err("sqrt 4"),
        CalcError::MissingCall {
            function: "sqrt",
            position: 0
        }
    );
    assert_eq!(
        err("1 + sqrt(1, 2)"),
        CalcError::ArgumentCount {
            function: "sqrt",
            expected: "exactly 1 argument",
            found: 2,
            position: 4
        }
    );
    assert_eq!(
        err("pow(2)"),
        CalcError::ArgumentCount {
            function: "pow",
            expected: "exactly 2 arguments",
            found: 1,
            position: 0
        }
    );
    assert_eq!(
        err("max()"),
        CalcError::ArgumentCount {
            function: "max",
            expected: "at least 1 argument",
            found: 0,
            position: 0
        }
    );
    assert_eq!(
        err("pi(2)"),
        CalcError::UnexpectedToken {
            found: "(".into(),
            expected: "an operator or the end of the expression",
            position: 2
        }
    );
}

#[test]
fn arithmetic_errors() {
    assert_eq!(err("1 / 0"), CalcError::DivisionByZero { position: 2 });
    assert_eq!(err("1 / -0"), CalcError::DivisionByZero { position: 2 });
    assert_eq!(err("5 % (2 - 2)"), CalcError::ModuloByZero { position: 2 });
    assert_eq!(err("sqrt(-1)"), CalcError::NonFinite { position: 0 });
    assert_eq!(err("2 + ln(0)"), CalcError::NonFinite { position: 4 });
    assert_eq!(err("10 ^ 400"), CalcError::NonFinite { position: 3 });
    assert_eq!(err("1e400"), CalcError::NonFinite { position: 0 });
    assert_eq!(err("1e308 * 10"), CalcError::NonFinite { position: 6 });
    // The first arithmetic error is the one reported…
    assert_eq!(err("1/0 + 1%0"), CalcError::DivisionByZero { position: 1 });
    // …but a syntax error anywhere wins over it.
    assert_eq!(err("1/0 + )").position(), Some(6));
    assert_eq!(
        err("1/0 + (2"),
        CalcError::UnclosedParenthesis { position: 6 }
    );
}

#[test]
fn messages_name_the_position() {
    assert_eq!(err("1 / 0").to_string(), "division by zero at byte 2");
    assert_eq!(
        err("(1").to_string(),
        "unbalanced parenthesis: the `(` at byte 0 is never closed"
    );
    assert_eq!(
        err("sqrt(1, 2)").to_string(),
        "`sqrt` at byte 0 takes exactly 1 argument, got 2"
    );
    assert_eq!(err("3 $").to_string(), "unexpected character `$` at byte 2");
}

fn nested(open: &str, depth: usize, close: &str) -> String {
    format!("{}1{}", open.repeat(depth), close.repeat(depth))
}

#[test]
fn nesting_is_bounded() {
    assert_eq!(ok(&nested("(", MAX_DEPTH, ")")), 1.0);
    assert_eq!(
        err(&nested("(", MAX_DEPTH + 1, ")")),
        CalcError::TooDeep {
            max: MAX_DEPTH,
            position: MAX_DEPTH
        }
    );
    assert_eq!(ok(&nested("-", MAX_DEPTH, "")), 1.0);
    assert!(matches!(
        err(&nested("-", MAX_DEPTH + 1, "")),
        CalcError::TooDeep { .. }
    ));
    assert!(matches!(
        err(&nested("abs(", 500, ")")),
        CalcError::TooDeep { .. }
    ));
    assert!(matches!(
        err(&format!("{}2", "1^".repeat(1000))),
        CalcError::TooDeep { .. }
    ));
    // Long flat chains do not nest, so they are fine up to the length limit.
    let chain = format!("1{}", " + 1".repeat(1000));
    assert_eq!(ok(&chain), 1001.0);
}

#[test]
fn depth_bomb_is_a_clean_error() {
    let bomb = nested("(", 10_000, ")");
    assert_eq!(
        err(&bomb),
        CalcError::TooLong {
            length: 20_001,
            max: MAX_LEN
        }
    );
    // The same bomb under the length limit hits the depth limit.
    let bomb = nested("(", MAX_LEN / 2 - 1, ")");
    assert!(bomb.len() <= MAX_LEN);
    assert!(matches!(err(&bomb), CalcError::TooDeep { .. }));
    let unclosed = "(".repeat(MAX_LEN);
    assert!(matches!(err(&unclosed), CalcError::TooDeep { .. }));
}

#[test]
fn length_is_bounded() {
    let long = format!("1{}", "+1".repeat(MAX_LEN / 2));
    assert!(matches!(err(&long), CalcError::TooLong { .. }));
    assert_eq!(err(&long).position(), None);
}

/// An expression tree, evaluated directly and printed with full parentheses.
#[derive(Debug, Clone)]
enum Expr {
    Num(f64),
    Pi,
    E,
    Neg(Box<Expr>),
    Bin(char, Box<Expr>, Box<Expr>),
    Call(&'static str, Vec<Expr>),
}

impl Expr {
    /// The value, or `None` where [`evaluate`] must fail: a zero divisor or a non-finite
    /// intermediate result.
    fn value(&self) -> Option<f64> {
        let finite = |v: f64| v.is_finite().then_some(v);
        match self {
            Expr::Num(v) => Some(*v),
            Expr::Pi => Some(std::f64::consts::PI),
            Expr::E => Some(std::f64::consts::E),
            Expr::Neg(x) => Some(-x.value()?),
            Expr::Bin(op, l, r) => {
                let (l, r) = (l.value()?, r.value()?);
                match op {
                    '+' => finite(l + r),
                    '-' => finite(l - r),
                    '*' => finite(l * r),
                    '/' if r == 0.0 => None,
                    '/' => finite(l / r),
                    '%' if r == 0.0 => None,
                    '%' => finite(l % r),
                    '^' => finite(l.powf(r)),
                    _ => unreachable!(),
                }
            }
            Expr::Call(name, args) => {
                let args: Vec<f64> = args.iter().map(Expr::value).collect::<Option<_>>()?;
                let v = match (*name, args.as_slice()) {
                    ("sqrt", [x]) => x.sqrt(),
                    ("abs", [x]) => x.abs(),
                    ("ln", [x]) => x.ln(),
                    ("exp", [x]) => x.exp(),
                    ("sin", [x]) => x.sin(),
                    ("atan", [x]) => x.atan(),
                    ("floor", [x]) => x.floor(),
                    ("round", [x]) => x.round(),
                    ("pow", [x, y]) => x.powf(*y),
                    ("min", xs) => xs.iter().copied().fold(f64::INFINITY, f64::min),
                    ("max", xs) => xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                    _ => unreachable!(),
                };
                finite(v)
            }
        }
    }

    fn print(&self) -> String {
        match self {
            Expr::Num(v) => format!("{v}"),
            Expr::Pi => "pi".into(),
            Expr::E => "e".into(),
            Expr::Neg(x) => format!("(-{})", x.print()),
            Expr::Bin(op, l, r) => format!("({} {op} {})", l.print(), r.print()),
            Expr::Call(name, args) => {
                let args: Vec<String> = args.iter().map(Expr::print).collect();
                format!("{name}({})", args.join(", "))
            }
        }
    }
}

fn expr_tree() -> impl Strategy<Value = Expr> {
    let leaf = prop_oneof![
        6 => (0u32..1000).prop_map(|n| Expr::Num(f64::from(n))),
        3 => (0.0f64..100.0).prop_map(Expr::Num),
        1 => Just(Expr::Pi),
        1 => Just(Expr::E),
    ];
    leaf.prop_recursive(8, 64, 4, |inner| {
        prop_oneof![
            inner.clone().prop_map(|x| Expr::Neg(Box::new(x))),
            (
                prop_oneof![
                    Just('+'),
                    Just('-'),
                    Just('*'),
                    Just('/'),
                    Just('%'),
                    Just('^')
                ],
                inner.clone(),
                inner.clone()
            )
                .prop_map(|(op, l, r)| Expr::Bin(op, Box::new(l), Box::new(r))),
            (
                prop_oneof![
                    Just("sqrt"),
                    Just("abs"),
                    Just("ln"),
                    Just("exp"),
                    Just("sin"),
                    Just("atan"),
                    Just("floor"),
                    Just("round")
                ],
                inner.clone()
            )
                .prop_map(|(name, x)| Expr::Call(name, vec![x])),
            (inner.clone(), inner.clone()).prop_map(|(x, y)| Expr::Call("pow", vec![x, y])),
            (
                prop_oneof![Just("min"), Just("max")],
                proptest::collection::vec(inner, 1..4)
            )
                .prop_map(|(name, xs)| Expr::Call(name, xs)),
        ]
    })
}

proptest! {
    #[test]
    fn never_panics_on_any_string(input in any::<String>()) {
        let _ = evaluate(&input);
    }

    #[test]
    fn never_panics_on_near_miss_input(input in "[0-9a-z+*/%^(),. eE_-]{0,80}") {
        if let Err(error) = evaluate(&input) {
            // Every error renders, and positions point into the input.
            let _ = error.to_string();
            if let Some(position) = error.position() {
                prop_assert!(position <= input.len());
            }
        }
    }

    #[test]
    fn parenthesized_trees_evaluate_like_the_tree(tree in expr_tree()) {
        let printed = tree.print();
        match (tree.value(), evaluate(&printed)) {
            (Some(expected), Ok(got)) => {
                let tolerance = 1e-9 * expected.abs().max(1.0);
                prop_assert!((expected - got).abs() <= tolerance, "{printed}: {expected} vs {got}");
            }
            (None, Err(_)) => {}
            (expected, got) => prop_assert!(false, "{printed}: tree gives {expected:?}, evaluate gives {got:?}"),
        }
    }

    #[test]
    fn deep_nesting_is_refused_cleanly(depth in 0usize..3000, kind in 0usize..4) {
        let expr = match kind {
            0 => nested("(", depth, ")"),
            1 => nested("-", depth, ""),
            2 => nested("sqrt(", depth, ")"),
            _ => format!("{}1", "1^".repeat(depth)),
        };
        match evaluate(&expr) {
            Ok(_) => prop_assert!(depth <= MAX_DEPTH),
            Err(CalcError::TooDeep { .. } | CalcError::TooLong { .. }) => prop_assert!(depth > MAX_DEPTH),
            Err(other) => prop_assert!(false, "{other}"),
        }
    }
}
