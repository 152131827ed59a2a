//! The arithmetic evaluator behind the [`calculator`](super::calculator) tool.
//!
//! [`evaluate`] reads an expression and computes it in one pass (no syntax tree is kept).
//!
//! # Grammar
//!
//! From loosest to tightest binding:
//!
//! | level | operators | associativity |
//! |---|---|---|
//! | sums | `+` `-` | left |
//! | products | `*` `/` `%` | left |
//! | signs | unary `+` `-` | prefix |
//! | powers | `^` | right |
//!
//! so `2^3^2` is `2^(3^2)` = 512 and `-2^2` is `-(2^2)` = -4, while `2^-1` is 0.5. `%` is the
//! floating-point remainder and takes the sign of the dividend (`-7 % 3` is -1).
//!
//! Operands are numbers (`42`, `3.5`, `.5`, `1e3`, `2.5E-4`; no `_` separators), the constants
//! `pi` and `e`, parenthesized expressions, and calls: `sqrt abs ln log10 log2 exp floor ceil
//! round` and the trigonometric `sin cos tan asin acos atan` (radians) take one argument, `pow`
//! takes two, `min` and `max` take one or more. Names are case-sensitive. There is no implicit
//! multiplication: write `2*pi`, not `2pi`.
//!
//! # Errors
//!
//! Every failure is a [`CalcError`] that names the byte offset it refers to (counted from 0 in
//! the expression as given). Syntax errors win over arithmetic ones: in `1/0 + )` the stray `)`
//! is reported, not the division by zero. Every intermediate result must be finite, so
//! `sqrt(-1)`, `ln(0)` and `10^400` fail instead of yielding NaN or infinity.
//!
//! Hostile input is bounded: expressions longer than [`MAX_LEN`] bytes and nesting (parentheses,
//! calls, signs and exponents) deeper than [`MAX_DEPTH`] levels are refused before they can
//! exhaust the stack.
//!
//! ```
//! use agent_tools::builtin::calc::{CalcError, evaluate};
//!
//! assert_eq!(evaluate("19 - 4"), Ok(15.0));
//! assert_eq!(evaluate("-2^2 + max(1, 7, 3)"), Ok(3.0));
//! assert_eq!(evaluate("1 / (2 - 2)"), Err(CalcError::DivisionByZero { position: 2 }));
//! ```

/// The longest expression accepted, in bytes.
pub const MAX_LEN: usize = 4096;

/// The deepest nesting accepted: each parenthesized group, call, unary sign and exponent opens
/// one level.
pub const MAX_DEPTH: usize = 64;

/// The names a model may use, for error messages.
const KNOWN_NAMES: &str = "constants pi, e; functions sqrt, abs, ln, log10, log2, exp, sin, cos, tan, asin, acos, atan, floor, ceil, round, min, max, pow";

/// Why an expression could not be evaluated.
///
/// Positions are byte offsets into the expression as given, counted from 0.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CalcError {
    /// The expression is empty or only whitespace.
    #[error("the expression is empty")]
    Empty,
    /// The expression is longer than [`MAX_LEN`].
    #[error("the expression is {length} bytes long; the limit is {max} bytes")]
    TooLong {
        /// Its length in bytes.
        length: usize,
        /// The limit ([`MAX_LEN`]).
        max: usize,
    },
    /// A character that starts no number, name or operator.
    #[error("unexpected character `{found}` at byte {position}")]
    UnexpectedCharacter {
        /// The character.
        found: char,
        /// Where it is.
        position: usize,
    },
    /// A number, name or operator where something else was needed.
    #[error("unexpected `{found}` at byte {position}: expected {expected}")]
    UnexpectedToken {
        /// The text found.
        found: String,
        /// What would have fit there.
        expected: &'static str,
        /// Where it starts.
        position: usize,
    },
    /// The expression stops where more was needed (`2 *`).
    #[error("the expression ends too early at byte {position}: expected {expected}")]
    UnexpectedEnd {
        /// What would have fit there.
        expected: &'static str,
        /// The expression's length.
        position: usize,
    },
    /// A number that does not parse (`1e`, `2e+`).
    #[error("malformed number `{text}` at byte {position}")]
    InvalidNumber {
        /// The number's text.
        text: String,
        /// Where it starts.
        position: usize,
    },
    /// A `(` without its `)`.
    #[error("unbalanced parenthesis: the `(` at byte {position} is never closed")]
    UnclosedParenthesis {
        /// Where the `(` is.
        position: usize,
    },
    /// A `)` without its `(`.
    #[error("unbalanced parenthesis: the `)` at byte {position} has no matching `(`")]
    UnmatchedParenthesis {
        /// Where the `)` is.
        position: usize,
    },
    /// A name that is neither a constant nor a function.
    #[error("unknown name `{name}` at byte {position}; known names: {KNOWN_NAMES}")]
    UnknownName {
        /// The name.
        name: String,
        /// Where it starts.
        position: usize,
    },
    /// A function named without a call (`sqrt 2`).
    #[error(
        "`{function}` at byte {position} is a function: call it with parentheses, as in `{function}(…)`"
    )]
    MissingCall {
        /// The function.
        function: &'static str,
        /// Where its name starts.
        position: usize,
    },
    /// A call with too few or too many arguments.
    #[error("`{function}` at byte {position} takes {expected}, got {found}")]
    ArgumentCount {
        /// The function.
        function: &'static str,
        /// How many it takes, in words ("exactly 2 arguments").
        expected: &'static str,
        /// How many it got.
        found: usize,
        /// Where its name starts.
        position: usize,
    },
    /// A division by zero.
    #[error("division by zero at byte {position}")]
    DivisionByZero {
        /// Where the `/` is.
        position: usize,
    },
    /// A remainder by zero.
    #[error("modulo by zero at byte {position}")]
    ModuloByZero {
        /// Where the `%` is.
        position: usize,
    },
    /// An operation whose result is infinite or not a number: an overflow (`10^400`) or an
    /// argument outside a function's domain (`sqrt(-1)`, `ln(0)`).
    #[error(
        "the operation at byte {position} has no finite result (it overflows, or an argument is outside the function's domain)"
    )]
    NonFinite {
        /// Where the operator, function name or number is.
        position: usize,
    },
    /// Nesting deeper than [`MAX_DEPTH`].
    #[error("the expression nests deeper than {max} levels at byte {position}")]
    TooDeep {
        /// The limit ([`MAX_DEPTH`]).
        max: usize,
        /// Where the level that went too deep opens.
        position: usize,
    },
}

impl CalcError {
    /// The byte offset the error refers to, when there is one.
    pub fn position(&self) -> Option<usize> {
        match self {
            Self::Empty | Self::TooLong { .. } => None,
            Self::UnexpectedCharacter { position, .. }
            | Self::UnexpectedToken { position, .. }
            | Self::UnexpectedEnd { position, .. }
            | Self::InvalidNumber { position, .. }
            | Self::UnclosedParenthesis { position }
            | Self::UnmatchedParenthesis { position }
            | Self::UnknownName { position, .. }
            | Self::MissingCall { position, .. }
            | Self::ArgumentCount { position, .. }
            | Self::DivisionByZero { position }
            | Self::ModuloByZero { position }
            | Self::NonFinite { position }
            | Self::TooDeep { position, .. } => Some(*position),
        }
    }
}

/// Evaluates `expr` (see the [module docs](self) for the grammar).
///
/// The result is always finite.
pub fn evaluate(expr: &str) -> Result<f64, CalcError> {
    if expr.len() > MAX_LEN {
        return Err(CalcError::TooLong {
            length: expr.len(),
            max: MAX_LEN,
        });
    }
    let tokens = lex(expr)?;
    if tokens.is_empty() {
        return Err(CalcError::Empty);
    }
    let mut parser = Parser {
        src: expr,
        tokens,
        next: 0,
        depth: 0,
        deferred: None,
    };
    let value = parser.expression()?;
    if let Some(token) = parser.peek() {
        return Err(match token.kind {
            Kind::RParen => CalcError::UnmatchedParenthesis {
                position: token.start,
            },
            _ => parser.unexpected(token, "an operator or the end of the expression"),
        });
    }
    match parser.deferred {
        Some(error) => Err(error),
        None => Ok(value),
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Number(f64),
    Name,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Caret,
    LParen,
    RParen,
    Comma,
}

#[derive(Debug, Clone, Copy)]
struct Token {
    kind: Kind,
    start: usize,
    end: usize,
}

fn lex(src: &str) -> Result<Vec<Token>, CalcError> {
    let bytes = src.as_bytes();
    let digits_from = |mut i: usize| {
        while bytes.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        i
    };
    let mut tokens = Vec::new();
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        let start = i;
        let simple = match byte {
            b'+' => Some(Kind::Plus),
            b'-' => Some(Kind::Minus),
            b'*' => Some(Kind::Star),
            b'/' => Some(Kind::Slash),
            b'%' => Some(Kind::Percent),
            b'^' => Some(Kind::Caret),
            b'(' => Some(Kind::LParen),
            b')' => Some(Kind::RParen),
            b',' => Some(Kind::Comma),
            _ => None,
        };
        if let Some(kind) = simple {
            i += 1;
            tokens.push(Token {
                kind,
                start,
                end: i,
            });
            continue;
        }
        let starts_number = byte.is_ascii_digit()
            || (byte == b'.' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit));
        if starts_number {
            i = digits_from(i);
            if bytes.get(i) == Some(&b'.') {
                i = digits_from(i + 1);
            }
            if matches!(bytes.get(i), Some(b'e' | b'E')) {
                let mut j = i + 1;
                if matches!(bytes.get(j), Some(b'+' | b'-')) {
                    j += 1;
                }
                let end = digits_from(j);
                if end == j {
                    // No implicit multiplication, so `2e` can only be a broken exponent.
                    return Err(CalcError::InvalidNumber {
                        text: src[start..j].to_owned(),
                        position: start,
                    });
                }
                i = end;
            }
            let text = &src[start..i];
            let value = text.parse::<f64>().map_err(|_| CalcError::InvalidNumber {
                text: text.to_owned(),
                position: start,
            })?;
            tokens.push(Token {
                kind: Kind::Number(value),
                start,
                end: i,
            });
            continue;
        }
        if byte.is_ascii_alphabetic() {
            while bytes.get(i).is_some_and(u8::is_ascii_alphanumeric) {
                i += 1;
            }
            tokens.push(Token {
                kind: Kind::Name,
                start,
                end: i,
            });
            continue;
        }
        // Tokens are ASCII, so `i` is always on a character boundary here.
        let c = src[i..].chars().next().unwrap_or('\u{fffd}');
        if c.is_whitespace() {
            i += c.len_utf8();
            continue;
        }
        return Err(CalcError::UnexpectedCharacter {
            found: c,
            position: start,
        });
    }
    Ok(tokens)
}

#[derive(Clone, Copy)]
enum Function {
    Unary(fn(f64) -> f64),
    Binary(fn(f64, f64) -> f64),
    /// One or more arguments, folded left to right.
    Fold(fn(f64, f64) -> f64),
}

fn function(name: &str) -> Option<(&'static str, Function)> {
    use Function::{Binary, Fold, Unary};
    Some(match name {
        "sqrt" => ("sqrt", Unary(f64::sqrt)),
        "abs" => ("abs", Unary(f64::abs)),
        "ln" => ("ln", Unary(f64::ln)),
        "log10" => ("log10", Unary(f64::log10)),
        "log2" => ("log2", Unary(f64::log2)),
        "exp" => ("exp", Unary(f64::exp)),
        "sin" => ("sin", Unary(f64::sin)),
        "cos" => ("cos", Unary(f64::cos)),
        "tan" => ("tan", Unary(f64::tan)),
        "asin" => ("asin", Unary(f64::asin)),
        "acos" => ("acos", Unary(f64::acos)),
        "atan" => ("atan", Unary(f64::atan)),
        "floor" => ("floor", Unary(f64::floor)),
        "ceil" => ("ceil", Unary(f64::ceil)),
        "round" => ("round", Unary(f64::round)),
        "min" => ("min", Fold(f64::min)),
        "max" => ("max", Fold(f64::max)),
        "pow" => ("pow", Binary(f64::powf)),
        _ => return None,
    })
}

fn constant(name: &str) -> Option<f64> {
    match name {
        "pi" => Some(std::f64::consts::PI),
        "e" => Some(std::f64::consts::E),
        _ => None,
    }
}

const OPERAND: &str = "a number, a name or `(`";

/// A recursive-descent parser that computes as it goes.
struct Parser<'a> {
    src: &'a str,
    tokens: Vec<Token>,
    next: usize,
    depth: usize,
    /// The first arithmetic error. Parsing goes on after it (with NaN standing in for the
    /// value) so that a later syntax error, which says more about the input, wins.
    deferred: Option<CalcError>,
}

impl Parser<'_> {
    fn peek(&self) -> Option<Token> {
        self.tokens.get(self.next).copied()
    }

    fn bump(&mut self) {
        self.next += 1;
    }

    fn text(&self, token: Token) -> &str {
        &self.src[token.start..token.end]
    }

    fn unexpected(&self, token: Token, expected: &'static str) -> CalcError {
        CalcError::UnexpectedToken {
            found: self.text(token).to_owned(),
            expected,
            position: token.start,
        }
    }

    fn end(&self, expected: &'static str) -> CalcError {
        CalcError::UnexpectedEnd {
            expected,
            position: self.src.len(),
        }
    }

    /// Opens a nesting level at `position`; every `enter` is paired with a `leave`.
    fn enter(&mut self, position: usize) -> Result<(), CalcError> {
        if self.depth >= MAX_DEPTH {
            return Err(CalcError::TooDeep {
                max: MAX_DEPTH,
                position,
            });
        }
        self.depth += 1;
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    fn defer(&mut self, error: CalcError) -> f64 {
        self.deferred.get_or_insert(error);
        f64::NAN
    }

    /// Passes `value` on, recording a [`CalcError::NonFinite`] at `position` if it is not finite.
    fn finite(&mut self, value: f64, position: usize) -> f64 {
        if !value.is_finite() {
            self.defer(CalcError::NonFinite { position });
        }
        value
    }

    /// `expression = product (("+" | "-") product)*`
    fn expression(&mut self) -> Result<f64, CalcError> {
        let mut value = self.product()?;
        while let Some(op) = self.peek() {
            let combine: fn(f64, f64) -> f64 = match op.kind {
                Kind::Plus => |a, b| a + b,
                Kind::Minus => |a, b| a - b,
                _ => break,
            };
            self.bump();
            let rhs = self.product()?;
            value = self.finite(combine(value, rhs), op.start);
        }
        Ok(value)
    }

    /// `product = signed (("*" | "/" | "%") signed)*`
    fn product(&mut self) -> Result<f64, CalcError> {
        let mut value = self.signed()?;
        while let Some(op) = self.peek() {
            if !matches!(op.kind, Kind::Star | Kind::Slash | Kind::Percent) {
                break;
            }
            self.bump();
            let rhs = self.signed()?;
            value = match op.kind {
                Kind::Slash if rhs == 0.0 => {
                    self.defer(CalcError::DivisionByZero { position: op.start })
                }
                Kind::Percent if rhs == 0.0 => {
                    self.defer(CalcError::ModuloByZero { position: op.start })
                }
                Kind::Slash => self.finite(value / rhs, op.start),
                Kind::Percent => self.finite(value % rhs, op.start),
                _ => self.finite(value * rhs, op.start),
            };
        }
        Ok(value)
    }

    /// `signed = ("+" | "-") signed | power`
    fn signed(&mut self) -> Result<f64, CalcError> {
        let Some(sign) = self.peek() else {
            return Err(self.end(OPERAND));
        };
        let negate = match sign.kind {
            Kind::Plus => false,
            Kind::Minus => true,
            _ => return self.power(),
        };
        self.bump();
        self.enter(sign.start)?;
        let value = self.signed()?;
        self.leave();
        Ok(if negate { -value } else { value })
    }

    /// `power = operand ("^" signed)?`: the exponent may carry a sign and is itself a power,
    /// which makes `^` right-associative.
    fn power(&mut self) -> Result<f64, CalcError> {
        let base = self.operand()?;
        match self.peek() {
            Some(op) if op.kind == Kind::Caret => {
                self.bump();
                self.enter(op.start)?;
                let exponent = self.signed()?;
                self.leave();
                Ok(self.finite(base.powf(exponent), op.start))
            }
            _ => Ok(base),
        }
    }

    /// `operand = number | constant | function "(" arguments ")" | "(" expression ")"`
    fn operand(&mut self) -> Result<f64, CalcError> {
        let Some(token) = self.peek() else {
            return Err(self.end(OPERAND));
        };
        match token.kind {
            Kind::Number(value) => {
                self.bump();
                Ok(self.finite(value, token.start))
            }
            Kind::Name => {
                self.bump();
                let name = self.text(token);
                if let Some(value) = constant(name) {
                    return Ok(value);
                }
                match function(name) {
                    Some((name, function)) => self.call(name, function, token.start),
                    None => Err(CalcError::UnknownName {
                        name: name.to_owned(),
                        position: token.start,
                    }),
                }
            }
            Kind::LParen => {
                self.bump();
                self.enter(token.start)?;
                let value = self.expression()?;
                self.close(token, "an operator or `)`")?;
                self.leave();
                Ok(value)
            }
            _ => Err(self.unexpected(token, OPERAND)),
        }
    }

    /// Consumes the `)` that closes `open`.
    fn close(&mut self, open: Token, expected: &'static str) -> Result<(), CalcError> {
        match self.peek() {
            Some(token) if token.kind == Kind::RParen => {
                self.bump();
                Ok(())
            }
            Some(token) => Err(self.unexpected(token, expected)),
            None => Err(CalcError::UnclosedParenthesis {
                position: open.start,
            }),
        }
    }

    fn call(
        &mut self,
        name: &'static str,
        function: Function,
        position: usize,
    ) -> Result<f64, CalcError> {
        let open = match self.peek() {
            Some(token) if token.kind == Kind::LParen => token,
            _ => {
                return Err(CalcError::MissingCall {
                    function: name,
                    position,
                });
            }
        };
        self.bump();
        self.enter(open.start)?;
        let mut args = Vec::new();
        if self.peek().is_some_and(|t| t.kind == Kind::RParen) {
            self.bump();
        } else {
            loop {
                args.push(self.expression()?);
                match self.peek() {
                    Some(token) if token.kind == Kind::Comma => self.bump(),
                    _ => {
                        self.close(open, "an operator, `,` or `)`")?;
                        break;
                    }
                }
            }
        }
        self.leave();
        let count_error = |expected| CalcError::ArgumentCount {
            function: name,
            expected,
            found: args.len(),
            position,
        };
        let value = match (function, args.as_slice()) {
            (Function::Unary(f), &[x]) => f(x),
            (Function::Unary(_), _) => return Err(count_error("exactly 1 argument")),
            (Function::Binary(f), &[x, y]) => f(x, y),
            (Function::Binary(_), _) => return Err(count_error("exactly 2 arguments")),
            (Function::Fold(f), [first, rest @ ..]) => rest.iter().fold(*first, |a, &b| f(a, b)),
            (Function::Fold(_), []) => return Err(count_error("at least 1 argument")),
        };
        Ok(self.finite(value, position))
    }
}

#[cfg(test)]
mod tests;
