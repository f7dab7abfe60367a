//! [`Redacted<T>`]: a value that must never be printed (N8).
//!
//! `Debug` and `Display` print `<redacted>`; the only way to the value is [`Redacted::expose`],
//! which makes every use greppable. The inner value is zeroed on drop (`zeroize`), so a freed
//! buffer does not keep the secret around in the heap.

use std::fmt;

use zeroize::Zeroize;

/// A value whose `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Redacted<T: Zeroize>(T);

impl<T: Zeroize> Redacted<T> {
    /// Wraps `value`.
    pub fn new(value: T) -> Redacted<T> {
        Redacted(value)
    }

    /// The value itself. Callers must not log or print it.
    pub fn expose(&self) -> &T {
        &self.0
    }
}

impl<T: Zeroize> Drop for Redacted<T> {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl<T: Zeroize> fmt::Debug for Redacted<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl<T: Zeroize> fmt::Display for Redacted<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl From<String> for Redacted<String> {
    fn from(value: String) -> Self {
        Redacted(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_never_print_the_value() {
        let r = Redacted::new(String::from("hunter2-very-secret"));
        assert_eq!(format!("{r:?}"), "<redacted>");
        assert_eq!(format!("{r}"), "<redacted>");
        assert_eq!(format!("{:#?}", Some(&r)), "Some(\n    <redacted>,\n)");
        assert_eq!(r.expose(), "hunter2-very-secret");
    }
}
