//! The JSON Schema of both config files (C2), generated from [`RawConfig`] — the same types
//! the parser deserializes every value through. Editors use it; it never replaces validation.

use crate::raw::RawConfig;

/// The schema's `$id`-like file name, as written beside the user config.
pub const SCHEMA_FILE_NAME: &str = "config.schema.json";

/// The JSON Schema covering the user config and project configs.
pub fn json_schema() -> serde_json::Value {
    let schema = schemars::schema_for!(RawConfig);
    let mut value = serde_json::to_value(schema)
        .unwrap_or_else(|e| unreachable!("a generated schema always serializes: {e}"));
    if let Some(obj) = value.as_object_mut() {
        obj.insert(
            "description".to_owned(),
            serde_json::Value::String(
                "airlock configuration: the user config ($XDG_CONFIG_HOME/airlock/config.toml) \
                 and project configs (.airlock/config.toml). Keys marked \"User config only\" \
                 are rejected in a project config."
                    .to_owned(),
            ),
        );
    }
    value
}

/// The schema as pretty-printed JSON text with a trailing newline.
pub fn json_schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&json_schema())
        .unwrap_or_else(|e| unreachable!("JSON values always serialize: {e}"));
    text.push('\n');
    text
}
