// Command protoschema generates src/client/codec/proto_tables.rs: for every built-in kind that
// client-go's scheme knows, how its protobuf message maps to its JSON form, in the types of
// src/client/proto_schema.rs.
//
// It reads the Go types by reflection, not the .proto files: the Go field types, the field
// number and name of the `protobuf` struct tag, and the `json` tag. It then checks the tables
// against the generated encoder: it marshals a sample of every field and reads back the
// field number and wire type (see verify.go), and fails on any difference.
//
// Usage:
//
//	go run . ../../src/client/codec/proto_tables.rs          write the file
//	go run . --check ../../src/client/codec/proto_tables.rs  fail if the file is not current
//	go run . -                                               write to stdout
//	go run . --notes -                                       also print the odd cases to stderr
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// apiVersion is the k8s.io/api version the tables are generated from; keep it equal to go.mod.
const apiVersion = "v0.36.3"

// regenerate is the command that rewrites the committed file, run from the repository root.
const regenerate = "cd tools/protoschema && go run . ../../src/client/codec/proto_tables.rs"

func main() {
	check := flag.Bool("check", false, "compare FILE with what would be generated instead of writing it")
	notes := flag.Bool("notes", false, "print the odd cases met (int kinds, json names that differ from proto names, ...) to stderr")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: protoschema [--check] [--notes] FILE|-\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	path := flag.Arg(0)

	tables, err := build(scheme.Scheme)
	if err != nil {
		fmt.Fprintf(os.Stderr, "protoschema: %v\n", err)
		os.Exit(1)
	}
	if *notes {
		for _, n := range tables.notes {
			fmt.Fprintln(os.Stderr, n)
		}
	}
	out := tables.render()

	switch {
	case *check:
		have, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "protoschema: %v\n", err)
			os.Exit(1)
		}
		if !bytes.Equal(have, out) {
			fmt.Fprintf(os.Stderr, "protoschema: %s is not what tools/protoschema generates; regenerate it with\n\t%s\n", path, regenerate)
			os.Exit(1)
		}
	case path == "-":
		os.Stdout.Write(out)
	default:
		if err := os.WriteFile(path, out, 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "protoschema: %v\n", err)
			os.Exit(1)
		}
	}
}

// === the tables ===

// tables is everything the Rust file holds, plus notes on odd cases met on the way.
type tables struct {
	messages []*message           // sorted by Go package path, then type name
	index    map[reflect.Type]int // position in messages
	kinds    []kind               // sorted by group, version, kind
	notes    []string             // sorted, deduplicated
}

// message is one Go type sent as a protobuf message.
type message struct {
	t      reflect.Type
	form   string     // the Rust Form variant: "Struct", "Time", ..., "List"
	elem   valueType  // for "List": the item type
	fields []fieldDef // for "Struct": the fields that have a protobuf number, in declaration order
}

// fieldDef is one field of a Struct message.
type fieldDef struct {
	number   int
	json     string // "" for an inline field
	ty       valueType
	card     string    // "Single", "Repeated", "Map"
	key      valueType // for "Map"
	omitZero bool
	goIndex  int // the index of the Go struct field
}

// valueType is a Rust Type: a scalar variant name, or a message.
type valueType struct {
	scalar string       // "String", "Bytes", "Bool", "Int32", "Int64"; "" for a message
	msg    reflect.Type // for a message
}

// kind is one group/version/kind and its message.
type kind struct {
	group, version, kind string
	t                    reflect.Type
}

// specialForms are the apimachinery types whose JSON form is not their protobuf fields.
var specialForms = map[string]string{
	"k8s.io/apimachinery/pkg/apis/meta/v1.Time":       "Time",
	"k8s.io/apimachinery/pkg/apis/meta/v1.MicroTime":  "MicroTime",
	"k8s.io/apimachinery/pkg/api/resource.Quantity":   "Quantity",
	"k8s.io/apimachinery/pkg/util/intstr.IntOrString": "IntOrString",
	"k8s.io/apimachinery/pkg/runtime.RawExtension":    "RawExtension",
	"k8s.io/apimachinery/pkg/apis/meta/v1.FieldsV1":   "FieldsV1",
}

// unsupportedForms are apimachinery types with a JSON form of their own that no kind of
// this version reaches, so the transcoder has no code for them: meeting one fails the
// run rather than writing its protobuf fields as JSON.
var unsupportedForms = map[string]bool{
	"k8s.io/apimachinery/pkg/apis/meta/v1.Duration": true,
}

// protoMessage is what apimachinery's protobuf serializer needs of an object, and what
// go-to-protobuf generates for every message. (k8s.io/api v0.35 dropped the gogo methods
// ProtoMessage, Descriptor and friends: Marshal and Unmarshal are what is left.)
var protoMessage = reflect.TypeOf((*interface {
	Marshal() ([]byte, error)
	Unmarshal([]byte) error
})(nil)).Elem()

// isMessage reports whether a named type is sent as a protobuf message of its own.
func isMessage(t reflect.Type) bool {
	return t.Name() != "" && reflect.PointerTo(t).Implements(protoMessage)
}

func typeName(t reflect.Type) string { return t.PkgPath() + "." + t.Name() }

// builder walks the types reachable from the kinds.
type builder struct {
	seen  map[reflect.Type]*message
	queue []reflect.Type
	notes map[string]bool
	errs  []string
}

func (b *builder) note(format string, args ...any) { b.notes[fmt.Sprintf(format, args...)] = true }
func (b *builder) fail(format string, args ...any) {
	b.errs = append(b.errs, fmt.Sprintf(format, args...))
}

// build walks every kind of s and the messages reachable from them.
func build(s *runtime.Scheme) (*tables, error) {
	b := &builder{seen: map[reflect.Type]*message{}, notes: map[string]bool{}}
	var kinds []kind
	for gvk, t := range s.AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal || strings.HasSuffix(gvk.Kind, "List") {
			continue
		}
		if !isMessage(t) {
			b.note("kind %s is not a protobuf message (%s): left out", gvk, typeName(t))
			continue
		}
		kinds = append(kinds, kind{gvk.Group, gvk.Version, gvk.Kind, t})
		b.enqueue(t)
	}
	for len(b.queue) > 0 {
		t := b.queue[0]
		b.queue = b.queue[1:]
		b.walk(t)
	}
	if len(b.errs) > 0 {
		sort.Strings(b.errs)
		return nil, fmt.Errorf("%d problem(s):\n\t%s", len(b.errs), strings.Join(b.errs, "\n\t"))
	}

	tb := &tables{index: map[reflect.Type]int{}}
	for _, m := range b.seen {
		tb.messages = append(tb.messages, m)
	}
	sort.Slice(tb.messages, func(i, j int) bool {
		a, c := tb.messages[i].t, tb.messages[j].t
		if a.PkgPath() != c.PkgPath() {
			return a.PkgPath() < c.PkgPath()
		}
		return a.Name() < c.Name()
	})
	if len(tb.messages) > 1<<16 {
		return nil, fmt.Errorf("%d messages do not fit the u16 indices", len(tb.messages))
	}
	for i, m := range tb.messages {
		tb.index[m.t] = i
	}
	if errs := tb.verify(); len(errs) > 0 {
		sort.Strings(errs)
		return nil, fmt.Errorf("the tables disagree with the encoder in %d place(s):\n\t%s", len(errs), strings.Join(errs, "\n\t"))
	}
	sort.Slice(kinds, func(i, j int) bool {
		a, c := kinds[i], kinds[j]
		if a.group != c.group {
			return a.group < c.group
		}
		if a.version != c.version {
			return a.version < c.version
		}
		return a.kind < c.kind
	})
	tb.kinds = kinds
	for n := range b.notes {
		tb.notes = append(tb.notes, n)
	}
	sort.Strings(tb.notes)
	return tb, nil
}

func (b *builder) enqueue(t reflect.Type) {
	if _, ok := b.seen[t]; ok {
		return
	}
	b.seen[t] = &message{t: t}
	b.queue = append(b.queue, t)
}

// walk fills in the message of t, a named protobuf message type.
func (b *builder) walk(t reflect.Type) {
	m := b.seen[t]
	name := typeName(t)
	if form, ok := specialForms[name]; ok {
		m.form = form
		return
	}
	if unsupportedForms[name] {
		b.fail("%s has a JSON form of its own that the transcoder does not write yet", name)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		m.form = "Struct"
	case reflect.Slice:
		// A named slice sent as `message { repeated items = 1 }`.
		m.form = "List"
		if isMessage(t.Elem()) || t.Elem().Kind() == reflect.Slice && t.Elem().Elem().Kind() != reflect.Uint8 {
			b.fail("%s: a list of %s is not handled", name, t.Elem())
			return
		}
		m.elem = b.valueOf(t.Elem(), name)
		b.note("named slice message %s: Form::List(%s)", name, m.elem.rust(nil))
		return
	case reflect.Map:
		b.fail("%s: a named map sent as a message is not handled", name)
		return
	default:
		b.fail("%s: a protobuf message of Go kind %s is not handled", name, t.Kind())
		return
	}

	numbers := map[int]string{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		where := name + "." + f.Name
		ptag, hasProto := f.Tag.Lookup("protobuf")
		jname, jopts := parseJSON(f.Tag.Get("json"))
		if !hasProto {
			switch {
			case f.Anonymous && f.Type.Name() == "TypeMeta":
				// apiVersion and kind: in the envelope, not the message.
			case !f.IsExported() || jname == "-":
			default:
				b.note("%s has no protobuf tag but is in JSON (json %q): left out", where, f.Tag.Get("json"))
			}
			continue
		}
		wire, number, label, pname, err := parseProto(ptag)
		if err != nil {
			b.fail("%s: %v", where, err)
			continue
		}
		if prev, ok := numbers[number]; ok {
			b.fail("%s: protobuf number %d is also %s", where, number, prev)
		}
		numbers[number] = f.Name

		fd := fieldDef{number: number}
		switch {
		case jname == "-" && !jopts["-"]:
			// Sent as protobuf but not as JSON: the tables have no way to say "skip it".
			b.fail("%s has protobuf tag %q but json:\"-\"", where, ptag)
			continue
		case jname != "":
			fd.json = jname
		case f.Anonymous:
			// encoding/json writes an embedded struct's fields into this object, with or
			// without `,inline` (which it ignores).
		default:
			// encoding/json names a field without a json name after the Go field, even
			// with `,inline`.
			fd.json = f.Name
			b.note("%s has no json name: %q, the Go field name", where, f.Name)
		}
		if fd.json != "" && fd.json != pname {
			if strings.EqualFold(fd.json, pname) {
				b.note("%s: json name %q differs in case from proto name %q", where, fd.json, pname)
			} else {
				b.note("%s: json name %q differs from proto name %q", where, fd.json, pname)
			}
		}

		ft := f.Type
		isPtr := ft.Kind() == reflect.Pointer
		if isPtr {
			ft = ft.Elem()
		}
		switch {
		case isMessage(ft) || ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Uint8:
			fd.card = "Single"
			fd.ty = b.valueOf(ft, where)
		case ft.Kind() == reflect.Slice:
			fd.card = "Repeated"
			et := ft.Elem()
			if et.Kind() == reflect.Pointer {
				b.note("%s: a slice of pointers %s", where, ft)
				et = et.Elem()
			}
			if et.Kind() == reflect.Slice && !isMessage(et) {
				if et.Elem().Kind() != reflect.Uint8 {
					b.fail("%s: a slice of slices %s is not handled", where, ft)
					continue
				}
				b.note("%s: a slice of byte slices %s: Repeated Bytes", where, ft)
			}
			if et.Kind() == reflect.Map && !isMessage(et) {
				b.fail("%s: a slice of maps %s is not handled", where, ft)
				continue
			}
			fd.ty = b.valueOf(et, where)
		case ft.Kind() == reflect.Map:
			fd.card = "Map"
			kt, vt := ft.Key(), ft.Elem()
			if kt.Kind() != reflect.String {
				b.note("%s: map key of Go type %s, not a string", where, kt)
			}
			if vt.Kind() == reflect.Pointer {
				b.note("%s: a map of pointers %s", where, ft)
				vt = vt.Elem()
			}
			if !isMessage(vt) && (vt.Kind() == reflect.Map || vt.Kind() == reflect.Slice && vt.Elem().Kind() != reflect.Uint8) {
				b.fail("%s: a map to %s is not handled", where, vt)
				continue
			}
			fd.key = b.valueOf(kt, where+" key")
			fd.ty = b.valueOf(vt, where+" value")
		default:
			fd.card = "Single"
			fd.ty = b.valueOf(ft, where)
		}
		// go-to-protobuf takes only the number and the name from the tag, and the wire
		// type and label from the Go type; the tags of k8s.io/api are hand-written and the
		// rest is often wrong (`Incomplete bool protobuf:"bytes,3,rep"`). verify checks the
		// tables against the encoder instead; a disagreeing tag is only a note.
		wantLabel := map[string]string{"Single": "opt", "Repeated": "rep", "Map": "rep"}[fd.card]
		if want := fd.ty.wire(); fd.card == "Map" && wire != "bytes" || fd.card != "Map" && wire != want || label != wantLabel {
			if fd.card == "Map" {
				want = "bytes"
			}
			b.note("tag: %s: protobuf tag %q, but the Go type %s is sent as %s,%s", where, ptag, f.Type, want, wantLabel)
		}
		fd.goIndex = i
		if fd.json == "" && (fd.card != "Single" || fd.ty.msg == nil || fd.ty.msg.Kind() != reflect.Struct || specialForms[typeName(fd.ty.msg)] != "") {
			b.fail("%s: an inline field must be a plain struct message, is %s", where, f.Type)
		}
		// For a scalar, omitzero (Go 1.24) leaves out the same values as omitempty. On a
		// message it leaves out a zero struct, which omitempty never does: the tables cannot
		// say that, so it is a note (ObjectMeta.CreationTimestamp is the one such field).
		// On a message it leaves out a zero struct, which protobuf sends as an empty message
		// (ObjectMeta.CreationTimestamp is the one such field).
		omit := jopts["omitempty"] || jopts["omitzero"]
		fd.omitZero = !isPtr && fd.card == "Single" && (omit && fd.ty.msg == nil || jopts["omitzero"] && fd.ty.msg != nil)
		m.fields = append(m.fields, fd)
	}
}

// valueOf is the Rust Type of one value of Go type t (not a pointer, not a repeated field's
// slice), enqueueing its message.
func (b *builder) valueOf(t reflect.Type, where string) valueType {
	if isMessage(t) {
		b.enqueue(t)
		return valueType{msg: t}
	}
	switch t.Kind() {
	case reflect.String:
		return valueType{scalar: "String"}
	case reflect.Bool:
		return valueType{scalar: "Bool"}
	case reflect.Int32:
		return valueType{scalar: "Int32"}
	case reflect.Int64:
		return valueType{scalar: "Int64"}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return valueType{scalar: "Bytes"}
		}
	case reflect.Int:
		// go-to-protobuf sends a Go int as int64.
		b.note("%s: Go kind int (%s): Int64", where, t)
		return valueType{scalar: "Int64"}
	case reflect.Struct:
		b.fail("%s: struct %s is not a protobuf message", where, typeName(t))
		return valueType{scalar: "?"}
	}
	b.fail("%s: Go type %s (kind %s) is not handled", where, t, t.Kind())
	return valueType{scalar: "?"}
}

// wire is the protobuf wire type of one value of v.
func (v valueType) wire() string {
	switch v.scalar {
	case "Bool", "Int32", "Int64":
		return "varint"
	}
	return "bytes"
}

// parseProto splits a `protobuf:"bytes,1,opt,name=metadata"` tag. Some tags of k8s.io/api
// lack the label (`bytes,3,name=fieldManager`): label is then "".
func parseProto(tag string) (wire string, number int, label, name string, err error) {
	parts := strings.Split(tag, ",")
	if len(parts) < 3 {
		return "", 0, "", "", fmt.Errorf("protobuf tag %q: too short", tag)
	}
	wire = parts[0]
	number, err = strconv.Atoi(parts[1])
	if err != nil || number <= 0 {
		return "", 0, "", "", fmt.Errorf("protobuf tag %q: bad number", tag)
	}
	for _, p := range parts[2:] {
		switch p {
		case "opt", "rep", "req":
			label = p
		default:
			if v, ok := strings.CutPrefix(p, "name="); ok {
				name = v
			}
		}
	}
	return wire, number, label, name, nil
}

// parseJSON splits a `json:"name,omitempty"` tag into the name and its options.
func parseJSON(tag string) (string, map[string]bool) {
	name, rest, _ := strings.Cut(tag, ",")
	opts := map[string]bool{}
	if tag == "-," {
		opts["-"] = true // the member is literally named "-"
	}
	for _, o := range strings.Split(rest, ",") {
		if o != "" {
			opts[o] = true
		}
	}
	return name, opts
}

// === rendering ===

func (v valueType) rust(index map[reflect.Type]int) string {
	if v.msg == nil {
		return "Type::" + v.scalar
	}
	if index == nil {
		return "Type::Message(" + typeName(v.msg) + ")"
	}
	return fmt.Sprintf("Type::Message(%d)", index[v.msg])
}

// rustString is s as a Rust string literal. Every name in k8s.io/api is printable ASCII, so
// there is nothing to escape; anything else stops the generator rather than risk an escape
// that Go and Rust spell differently.
func rustString(s string) string {
	for _, c := range s {
		if c < ' ' || c > '~' || c == '"' || c == '\\' {
			panic(fmt.Sprintf("name %q needs escaping", s))
		}
	}
	return `"` + s + `"`
}

// render writes the Rust file.
func (tb *tables) render() []byte {
	var w bytes.Buffer
	fmt.Fprintf(&w, `//! The protobuf messages of the built-in kinds and how each maps to JSON, in the types of
//! [`+"`proto_schema`"+`](super::proto_schema): generated by `+"`tools/protoschema`"+` from
//! k8s.io/api %s by reflection over client-go's scheme. Do not edit; regenerate with
//! `+"`%s`"+`.

// @generated

use super::proto_schema::{Card, FieldDef, Form, Kind, Message, Type};

/// Every message reachable from [`+"`KINDS`"+`], sorted by Go package path and type name;
/// [`+"`Type::Message`"+`] and [`+"`Kind::message`"+`] are indices into it.
#[rustfmt::skip]
pub(crate) static MESSAGES: &[Message] = &[
`, apiVersion, regenerate)
	for i, m := range tb.messages {
		form := "Form::" + m.form
		if m.form == "List" {
			form = "Form::List(" + m.elem.rust(tb.index) + ")"
		}
		if len(m.fields) == 0 {
			fmt.Fprintf(&w, "    // %d\n    Message { name: %s, form: %s, fields: &[] },\n", i, rustString(typeName(m.t)), form)
			continue
		}
		fmt.Fprintf(&w, "    // %d\n    Message { name: %s, form: %s, fields: &[\n", i, rustString(typeName(m.t)), form)
		for _, f := range m.fields {
			card := "Card::" + f.card
			if f.card == "Map" {
				card = "Card::Map(" + f.key.rust(tb.index) + ")"
			}
			fmt.Fprintf(&w, "        FieldDef { number: %d, json: %s, ty: %s, card: %s, omit_zero: %t },\n",
				f.number, rustString(f.json), f.ty.rust(tb.index), card, f.omitZero)
		}
		w.WriteString("    ] },\n")
	}
	w.WriteString(`];

/// Every group, version and kind of client-go's scheme whose Go type is a protobuf message,
/// but the lists and the internal version, sorted by group, version and kind for a binary
/// search.
#[rustfmt::skip]
pub(crate) static KINDS: &[Kind] = &[
`)
	for _, k := range tb.kinds {
		fmt.Fprintf(&w, "    Kind { group: %s, version: %s, kind: %s, message: %d },\n", rustString(k.group), rustString(k.version), rustString(k.kind), tb.index[k.t])
	}
	w.WriteString("];\n")
	return w.Bytes()
}
