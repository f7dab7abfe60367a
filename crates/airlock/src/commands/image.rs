//! `airlock image import FILE --name NAME | ls | rm NAME` (PRODUCT I2, §2).
//!
//! Images live in `<data>/images/` (see `airlock_image::store`). `import` checks the name and
//! the file before anything is created, then unpacks in the way the invoker's identity allows
//! (`airlock_image::Runner::for_invoker`): root keeps the archive's owners; an unprivileged
//! user with subordinate ids unpacks in a helper inside a user namespace mapped like the
//! sandbox's; without subordinate ids every file is the user's own. A refused or failed import
//! publishes nothing. `rm` is refused while a sandbox record names the image.

use std::path::PathBuf;

use airlock_image::store::Ownership;
use airlock_image::{ImageInfo, ImageName, ImportError, ImportRequest, Runner, Store, StoreError};
use clap::{Args, Subcommand};

use super::Report;
use crate::context::Context;
use crate::error::{CommandError, ErrorKind};
use crate::output::{escape_untrusted, path_text, Doc, Style};

#[derive(Args, Debug)]
pub struct ImageArgs {
    #[command(subcommand)]
    pub command: ImageCommand,
}

#[derive(Subcommand, Debug)]
pub enum ImageCommand {
    /// Import a root filesystem tar, a `docker save` archive or an OCI image layout tar
    Import(ImportArgs),
    /// List imported images: name, source, size, digest, import time
    Ls(LsArgs),
    /// Remove an imported image (refused while a sandbox uses it)
    Rm(RmArgs),
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// The archive (plain or gzip-compressed tar)
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The image's name: 1 to 63 of a-z, 0-9, '.', '_', '-', starting with a letter or digit
    #[arg(long, value_name = "NAME")]
    pub name: String,
    /// Refuse archives whose files add up to more than this (e.g. 500M, 8G)
    #[arg(long, value_name = "SIZE", default_value = "32G", value_parser = parse_size)]
    pub max_size: u64,
}

#[derive(Args, Debug)]
pub struct LsArgs {}

#[derive(Args, Debug)]
pub struct RmArgs {
    /// The image to remove
    #[arg(value_name = "NAME")]
    pub name: String,
}

pub fn run(args: ImageArgs, ctx: &Context) -> Result<Report, CommandError> {
    match args.command {
        ImageCommand::Import(a) => import(a, ctx),
        ImageCommand::Ls(_) => ls(ctx),
        ImageCommand::Rm(a) => rm(a, ctx),
    }
}

/// `1234`, `500K`, `500M`, `8G` (powers of 1024).
fn parse_size(s: &str) -> Result<u64, String> {
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, ""),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a size like 500M or 8G"))?;
    let shift = match unit {
        "" => 0,
        "K" | "k" => 10,
        "M" | "m" => 20,
        "G" | "g" => 30,
        "T" | "t" => 40,
        _ => return Err(format!("{s:?} is not a size like 500M or 8G")),
    };
    n.checked_mul(1 << shift)
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{s:?} is out of range"))
}

fn usage(code: &'static str, message: String, hint: &str) -> CommandError {
    CommandError::new(ErrorKind::Usage, code, message).with_hint(hint)
}

fn parse_name(name: &str) -> Result<ImageName, CommandError> {
    ImageName::parse(name).map_err(|e| usage("image.bad_name", e, "e.g. --name debian-12"))
}

/// The runner (and the ownership it gives) for this invoker.
fn runner() -> (Runner, Ownership) {
    Runner::for_this_process(PathBuf::from("/proc/self/exe"))
}

fn import(args: ImportArgs, ctx: &Context) -> Result<Report, CommandError> {
    // Everything checkable is checked before the store is created (L2).
    let name = parse_name(&args.name)?;
    let file = ctx.cwd.join(&args.file);
    match std::fs::metadata(&file) {
        Ok(m) if m.is_file() => {}
        Ok(_) => {
            return Err(usage(
                "image.not_a_file",
                format!("{} is not a regular file", path_text(&file)),
                "give the path of a .tar or .tar.gz archive",
            ))
        }
        Err(e) => {
            return Err(usage(
                "image.unreadable",
                format!("cannot read {}: {e}", path_text(&file)),
                "give the path of a .tar or .tar.gz archive",
            ))
        }
    }
    let roots = ctx.roots()?;
    let store = Store::open(&roots.data).map_err(store_error)?;
    let (runner, ownership) = runner();
    let req = ImportRequest {
        archive: file,
        name,
        max_bytes: args.max_size,
        max_entries: airlock_image::extract::Caps::default().max_entries,
        now: airlock_core::records::utc_text(airlock_core::records::now_ms()),
    };
    let info = airlock_image::import(&store, &req, &runner, ownership).map_err(import_error)?;
    let mut doc = Doc::new();
    doc.heading("Image imported");
    fields(&mut doc, &info, 1);
    doc.text(
        1,
        &[(
            Style::Dim,
            &format!("use it with image = \"{}\" in a config", info.name),
        )],
    );
    let mut report = Report::new(doc, serde_json::json!({ "image": info }));
    if info.stats.devices_skipped > 0 {
        report.note(format!(
            "note: skipped {} device node(s): a sandbox gets its own /dev",
            info.stats.devices_skipped
        ));
    }
    if info.stats.setid_stripped > 0 {
        report.note(format!(
            "note: removed the setuid/setgid bit of {} file(s): image files must not be set-id \
             programs on the host, and sandboxes run them without privileges anyway",
            info.stats.setid_stripped
        ));
    }
    if info.ownership == Ownership::Invoker {
        report.note(
            "note: without subordinate ids (/etc/subuid) every file of the image belongs to you \
             and the archive's owners are not kept; `airlock doctor` says how to add them",
        );
    }
    Ok(report)
}

fn ls(ctx: &Context) -> Result<Report, CommandError> {
    let roots = ctx.roots()?;
    let entries = match Store::open_existing(&roots.data).map_err(store_error)? {
        Some(store) => store.list().map_err(store_error)?,
        None => Vec::new(),
    };
    let mut doc = Doc::new();
    doc.heading("Images");
    if entries.is_empty() {
        doc.text(
            1,
            &[(
                Style::Dim,
                "none; `airlock image import FILE --name NAME` imports one",
            )],
        );
    }
    let mut images = Vec::new();
    let mut report_notes = Vec::new();
    for entry in entries {
        match entry {
            Ok(info) => {
                doc.text(1, &[(Style::Plain, &info.name)]);
                fields(&mut doc, &info, 2);
                images.push(info);
            }
            Err(e) => report_notes.push(format!("warning: {}", escape_untrusted(&e.to_string()))),
        }
    }
    let mut report = Report::new(doc, serde_json::json!({ "images": images }));
    report.notes = report_notes;
    Ok(report)
}

fn rm(args: RmArgs, ctx: &Context) -> Result<Report, CommandError> {
    let name = parse_name(&args.name)?;
    let roots = ctx.roots()?;
    let Some(store) = Store::open_existing(&roots.data).map_err(store_error)? else {
        return Err(store_error(StoreError::NotFound {
            name: name.to_string(),
        }));
    };
    let info = store.get(&name).map_err(store_error)?;
    let users = sandboxes_using(&roots, &info)?;
    if !users.is_empty() {
        return Err(CommandError::new(
            ErrorKind::Failed,
            "image.in_use",
            format!(
                "image {name:?} is used by the sandbox(es) {}",
                users.join(", ")
            ),
        )
        .with_hint("run `airlock down` in their projects first (`airlock ls` lists them)"));
    }
    let (runner, _) = runner();
    let info = airlock_image::remove(&store, &name, &runner).map_err(import_error)?;
    let mut doc = Doc::new();
    doc.heading("Image removed").field(1, "name", &info.name);
    Ok(Report::new(
        doc,
        serde_json::json!({ "removed": info.name }),
    ))
}

/// Names of recorded sandboxes whose plan names this image (whatever their health: a stopped
/// sandbox's record still points at it until `down` or `clean` removes it).
fn sandboxes_using(
    roots: &airlock_config::Roots,
    info: &ImageInfo,
) -> Result<Vec<String>, CommandError> {
    let stores = airlock_core::lifecycle::Stores::open(&roots.state)?;
    let mut users = Vec::new();
    for name in stores.names()? {
        // A record that cannot be read might be using it: refuse rather than guess.
        let uses = match stores.record(&name) {
            Ok(Some(rec)) => airlock_image::uses_image(&rec.data.plan.image, &info.name),
            Ok(None) => false,
            Err(_) => true,
        };
        if uses {
            users.push(name.to_string());
        }
    }
    Ok(users)
}

fn fields(doc: &mut Doc, info: &ImageInfo, indent: usize) {
    doc.field(indent, "source", info.source.as_str());
    doc.field(indent, "digest", &info.digest);
    doc.field(
        indent,
        "size",
        &airlock_host::lifecycle::human_bytes(info.size),
    );
    doc.field(indent, "layers", &info.layers.to_string());
    doc.field(indent, "imported", &info.imported_at);
    doc.field(
        indent,
        "owners",
        match info.ownership {
            Ownership::Archive => "as in the archive",
            Ownership::Subordinate => "as in the archive (your subordinate ids)",
            Ownership::Invoker => "all yours (no subordinate ids)",
        },
    );
}

fn store_error(e: StoreError) -> CommandError {
    let make = |kind, code, e: &StoreError, hint: &str| {
        CommandError::new(kind, code, escape_untrusted(&e.to_string()).into_owned()).with_hint(hint)
    };
    match &e {
        StoreError::Private(_) | StoreError::Io { .. } | StoreError::Write { .. } => make(
            ErrorKind::Internal,
            "image.io",
            &e,
            "check the permissions and free space of airlock's data directory",
        ),
        StoreError::Exists { name } => make(
            ErrorKind::Failed,
            "image.exists",
            &e,
            &format!("choose another --name, or `airlock image rm {name}` first"),
        ),
        StoreError::NotFound { .. } => make(
            ErrorKind::Failed,
            "image.not_found",
            &e,
            "`airlock image ls` lists the imported images",
        ),
        StoreError::Corrupt { .. } => make(
            ErrorKind::Internal,
            "image.corrupt",
            &e,
            "remove the image with `airlock image rm NAME` and import it again",
        ),
    }
}

fn import_error(e: ImportError) -> CommandError {
    match e {
        ImportError::Store(s) => store_error(s),
        ImportError::Refused { message } => CommandError::new(
            ErrorKind::Failed,
            "image.refused",
            format!("the archive was refused: {}", escape_untrusted(&message)),
        )
        .with_hint("nothing was imported; check where the archive came from"),
        ImportError::Failed { message } => CommandError::new(
            ErrorKind::Internal,
            "image.failed",
            escape_untrusted(&message).into_owned(),
        )
        .with_hint("nothing was imported; check free space and permissions, then try again"),
        ImportError::Helper(h) => {
            CommandError::new(ErrorKind::BackendUnavailable, "image.helper", h.to_string())
                .with_hint("`airlock doctor` checks user namespaces and subordinate ids")
        }
    }
}
