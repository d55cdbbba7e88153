// Package view is idem's operator view: what the admin API, the web console and
// the CLI's operator commands (idem keys, dlq, outbox, sagas) show of a key
// record, a dead letter, a parked outbox message, a saga and an effect, declared
// once, and how stored bytes are rendered, written once.
//
// A surface never shows stored bytes whole unless asked: NewPreview keeps at
// most PreviewBytes of them, as text when they are printable UTF-8, else as hex,
// the same for every surface (the API and `idem … --json` write the Preview as
// JSON, the console puts its text into the page as text, a table prints
// Preview.Text). Strings read from a database may come from an attacker: Clean
// makes one safe for a JSON message or a log (controls become '?'), Escape and
// Cell for a terminal (controls become \x.. escapes, so none is obeyed and
// none breaks a table's columns).
package view
