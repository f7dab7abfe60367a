//! `airlock image import FILE --name NAME | ls | rm NAME` (PRODUCT I2, §2): the arguments and
//! what is printed. The work, checks first, is `airlock_host::images`.

use std::path::PathBuf;

use airlock_image::store::Ownership;
use airlock_image::ImageInfo;
use clap::{Args, Subcommand};

use super::Report;
use crate::context::Context;
use crate::error::{untrusted, HostError};
use crate::output::{escape_untrusted, Doc, Style};

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

pub fn run(args: ImageArgs, ctx: &Context) -> Result<Report, HostError> {
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

fn import(args: ImportArgs, ctx: &Context) -> Result<Report, HostError> {
    let roots = ctx.roots()?;
    let file = ctx.cwd.join(&args.file);
    let info = airlock_host::images::import(&roots, &file, &args.name, args.max_size)
        .map_err(untrusted)?;
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

fn ls(ctx: &Context) -> Result<Report, HostError> {
    let entries = airlock_host::images::list(&ctx.roots()?).map_err(untrusted)?;
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

fn rm(args: RmArgs, ctx: &Context) -> Result<Report, HostError> {
    let info = airlock_host::images::remove(&ctx.roots()?, &args.name).map_err(untrusted)?;
    let mut doc = Doc::new();
    doc.heading("Image removed").field(1, "name", &info.name);
    Ok(Report::new(
        doc,
        serde_json::json!({ "removed": info.name }),
    ))
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
