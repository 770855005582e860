package main

// verify checks the tables against the encoder go-to-protobuf generated: the struct tags
// of k8s.io/api are hand-written and their wire types and labels are often wrong, so the
// truth is what Marshal writes.

import (
	"fmt"
	"reflect"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The protobuf wire types.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

var wireNumber = map[string]int{"varint": wireVarint, "fixed64": wireFixed64, "bytes": wireBytes}

// entry is one field of an encoded message.
type entry struct {
	num, wire int
	varint    uint64 // for wireVarint
	data      []byte // for wireBytes
}

// parseWire splits an encoded message into its fields.
func parseWire(buf []byte) ([]entry, error) {
	var out []entry
	for len(buf) > 0 {
		key, n := uvarint(buf)
		if n == 0 {
			return nil, fmt.Errorf("bad key varint")
		}
		buf = buf[n:]
		e := entry{num: int(key >> 3), wire: int(key & 7)}
		switch e.wire {
		case wireVarint:
			e.varint, n = uvarint(buf)
			if n == 0 {
				return nil, fmt.Errorf("field %d: bad varint", e.num)
			}
			buf = buf[n:]
		case wireFixed64:
			if len(buf) < 8 {
				return nil, fmt.Errorf("field %d: short fixed64", e.num)
			}
			buf = buf[8:]
		case wireFixed32:
			if len(buf) < 4 {
				return nil, fmt.Errorf("field %d: short fixed32", e.num)
			}
			buf = buf[4:]
		case wireBytes:
			l, n := uvarint(buf)
			if n == 0 || uint64(len(buf)-n) < l {
				return nil, fmt.Errorf("field %d: bad length", e.num)
			}
			e.data = buf[n : n+int(l)]
			buf = buf[n+int(l):]
		default:
			return nil, fmt.Errorf("field %d: wire type %d", e.num, e.wire)
		}
		out = append(out, e)
	}
	return out, nil
}

// uvarint decodes a varint, returning 0 bytes read if it is malformed.
func uvarint(buf []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(buf) && i < 10; i++ {
		v |= uint64(buf[i]&0x7f) << (7 * i)
		if buf[i] < 0x80 {
			return v, i + 1
		}
	}
	return 0, 0
}

// marshal encodes p, a pointer to a message.
func marshal(p reflect.Value) (entries []entry, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("Marshal panicked: %v", r)
		}
	}()
	data, err := p.Interface().(interface{ Marshal() ([]byte, error) }).Marshal()
	if err != nil {
		return nil, fmt.Errorf("Marshal: %v", err)
	}
	return parseWire(data)
}

// sample is a value of t that the encoder writes: non-zero scalars (-1 for signed integers,
// to see the sign extension), two elements for a slice, one entry for a map, the zero
// value for a struct (whose non-pointer message fields are always written).
func sample(t reflect.Type) reflect.Value {
	v := reflect.New(t).Elem()
	switch t.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(t.Elem()))
		v.Elem().Set(sample(t.Elem()))
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(-1)
	case reflect.Uint, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte{1})
			break
		}
		v.Set(reflect.MakeSlice(t, 2, 2))
		v.Index(0).Set(sample(t.Elem()))
		v.Index(1).Set(sample(t.Elem()))
	case reflect.Map:
		v.Set(reflect.MakeMap(t))
		v.SetMapIndex(sample(t.Key()), sample(t.Elem()))
	}
	return v
}

// verify checks every message of the tables against what its Go type's Marshal writes.
func (tb *tables) verify() []string {
	var errs []string
	for _, m := range tb.messages {
		name := typeName(m.t)
		switch m.form {
		case "Struct":
			errs = append(errs, tb.verifyStruct(m)...)
		case "List":
			p := reflect.New(m.t)
			p.Elem().Set(sample(m.t))
			es, err := marshal(p)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", name, err))
				continue
			}
			if err := checkValues(es, fieldDef{number: 1, card: "Repeated", ty: m.elem}, m.t.Elem()); err != nil {
				errs = append(errs, fmt.Sprintf("%s: as a list of %s: %v", name, m.elem.rust(nil), err))
			}
		default:
			if err := verifySpecial(m); err != nil {
				errs = append(errs, fmt.Sprintf("%s (Form::%s): %v", name, m.form, err))
			}
		}
	}
	return errs
}

// verifyStruct marshals m's Go type with each field set in turn, and with every exported
// field set at once, and checks the numbers and wire types against m's fields.
func (tb *tables) verifyStruct(m *message) []string {
	var errs []string
	name := typeName(m.t)
	byNumber := map[int]fieldDef{}
	for _, fd := range m.fields {
		byNumber[fd.number] = fd
		p := reflect.New(m.t)
		f := m.t.Field(fd.goIndex)
		p.Elem().Field(fd.goIndex).Set(sample(f.Type))
		es, err := marshal(p)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s.%s: %v", name, f.Name, err))
			continue
		}
		var mine []entry
		for _, e := range es {
			if e.num == fd.number {
				mine = append(mine, e)
			}
		}
		if err := checkValues(mine, fd, f.Type); err != nil {
			errs = append(errs, fmt.Sprintf("%s.%s (number %d): %v", name, f.Name, fd.number, err))
		}
	}

	// Every exported field set: no number the table does not know.
	p := reflect.New(m.t)
	for i := 0; i < m.t.NumField(); i++ {
		if f := m.t.Field(i); f.IsExported() && f.Type.Kind() != reflect.Interface {
			p.Elem().Field(i).Set(sample(f.Type))
		}
	}
	es, err := marshal(p)
	if err != nil {
		return append(errs, fmt.Sprintf("%s with every field set: %v", name, err))
	}
	for _, e := range es {
		if _, ok := byNumber[e.num]; !ok {
			errs = append(errs, fmt.Sprintf("%s: Marshal writes field number %d (wire type %d), which the table lacks", name, e.num, e.wire))
		}
	}
	return errs
}

// checkValues checks the entries of one field, set to sample(goType), against fd.
func checkValues(es []entry, fd fieldDef, goType reflect.Type) error {
	want := wireNumber[fd.ty.wire()]
	numeric := want != wireBytes
	switch fd.card {
	case "Single":
		if len(es) != 1 {
			return fmt.Errorf("%d entries for one value", len(es))
		}
		if es[0].wire != want {
			return fmt.Errorf("wire type %d, the table says %s", es[0].wire, fd.ty.wire())
		}
		if goType.Kind() == reflect.Int32 && es[0].varint != ^uint64(0) {
			return fmt.Errorf("int32 -1 is varint %#x, not sign-extended", es[0].varint)
		}
	case "Repeated":
		switch {
		case len(es) == 2 && es[0].wire == want && es[1].wire == want:
		case numeric && len(es) == 1 && es[0].wire == wireBytes:
			return fmt.Errorf("packed, which the table does not say")
		default:
			return fmt.Errorf("%d entries for two elements (wire types %v), the table says %s", len(es), wires(es), fd.ty.wire())
		}
	case "Map":
		if len(es) != 1 || es[0].wire != wireBytes {
			return fmt.Errorf("%d entries (wire types %v) for one map entry", len(es), wires(es))
		}
		kv, err := parseWire(es[0].data)
		if err != nil {
			return fmt.Errorf("map entry: %v", err)
		}
		if len(kv) != 2 || kv[0].num != 1 || kv[1].num != 2 {
			return fmt.Errorf("map entry is not {1: key, 2: value}: %+v", kv)
		}
		if kv[0].wire != wireNumber[fd.key.wire()] || kv[1].wire != want {
			return fmt.Errorf("map entry wire types %d, %d; the table says %s, %s", kv[0].wire, kv[1].wire, fd.key.wire(), fd.ty.wire())
		}
	}
	return nil
}

func wires(es []entry) []int {
	var out []int
	for _, e := range es {
		out = append(out, e.wire)
	}
	return out
}

// verifySpecial checks that the special forms are encoded as proto_schema.rs says.
func verifySpecial(m *message) error {
	// The samples of each form, and the wire type of each field number proto_schema.rs gives.
	var samples []any
	var want map[int]int
	switch m.form {
	case "Time":
		samples = []any{&metav1.Time{Time: time.Unix(5, 7000)}}
		want = map[int]int{1: wireVarint, 2: wireVarint}
	case "MicroTime":
		samples = []any{&metav1.MicroTime{Time: time.Unix(5, 7000)}}
		want = map[int]int{1: wireVarint, 2: wireVarint}
	case "Quantity":
		q := resource.MustParse("1Ki")
		samples = []any{&q}
		want = map[int]int{1: wireBytes}
	case "IntOrString":
		i, s := intstr.FromInt32(-3), intstr.FromString("a")
		samples = []any{&i, &s}
		want = map[int]int{1: wireVarint, 2: wireVarint, 3: wireBytes}
	case "RawExtension":
		samples = []any{&runtime.RawExtension{Raw: []byte("{}")}}
		want = map[int]int{1: wireBytes}
	case "FieldsV1":
		samples = []any{&metav1.FieldsV1{Raw: []byte("{}")}}
		want = map[int]int{1: wireBytes}
	default:
		return fmt.Errorf("no check for this form")
	}
	for _, s := range samples {
		if reflect.TypeOf(s).Elem() != m.t {
			return fmt.Errorf("the sample is a %T", s)
		}
		es, err := marshal(reflect.ValueOf(s))
		if err != nil {
			return err
		}
		if len(es) == 0 {
			return fmt.Errorf("%+v encodes to nothing", s)
		}
		for _, e := range es {
			if w, ok := want[e.num]; !ok || w != e.wire {
				return fmt.Errorf("%+v writes field %d with wire type %d", s, e.num, e.wire)
			}
		}
	}
	return nil
}
