package main

import (
	"bytes"
	"os"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
)

func mustBuild(t *testing.T) *tables {
	t.Helper()
	tb, err := build(scheme.Scheme)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func messageOf(t *testing.T, tb *tables, v any) (int, *message) {
	t.Helper()
	i, ok := tb.index[reflect.TypeOf(v)]
	if !ok {
		t.Fatalf("no message for %T", v)
	}
	return i, tb.messages[i]
}

func TestCommittedFileIsCurrent(t *testing.T) {
	have, err := os.ReadFile("../../src/client/codec/proto_tables.rs")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, mustBuild(t).render()) {
		t.Fatalf("src/client/codec/proto_tables.rs is stale; regenerate with\n\t%s", regenerate)
	}
}

func TestRenderIsDeterministic(t *testing.T) {
	if !bytes.Equal(mustBuild(t).render(), mustBuild(t).render()) {
		t.Fatal("two runs render differently")
	}
}

func TestConfigMapFieldsInDeclarationOrder(t *testing.T) {
	tb := mustBuild(t)
	_, m := messageOf(t, tb, corev1.ConfigMap{})
	var got []string
	for _, f := range m.fields {
		got = append(got, f.json)
	}
	if want := []string{"metadata", "immutable", "data", "binaryData"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ConfigMap fields %v, want %v", got, want)
	}
	data, binary := m.fields[2], m.fields[3]
	if data.number != 2 || data.card != "Map" || data.key.scalar != "String" || data.ty.scalar != "String" {
		t.Errorf("data: %+v", data)
	}
	if binary.number != 3 || binary.ty.scalar != "Bytes" {
		t.Errorf("binaryData: %+v", binary)
	}
	// immutable is *bool: a pointer's zero is kept.
	if m.fields[1].omitZero {
		t.Error("immutable (*bool) has omit_zero")
	}
}

func TestInlineFieldHasEmptyJSONName(t *testing.T) {
	tb := mustBuild(t)
	_, vol := messageOf(t, tb, corev1.Volume{})
	src, _ := messageOf(t, tb, corev1.VolumeSource{})
	f := vol.fields[1]
	if f.json != "" || f.number != 2 || f.ty.msg != reflect.TypeOf(corev1.VolumeSource{}) || tb.index[f.ty.msg] != src {
		t.Fatalf("Volume.VolumeSource: %+v", f)
	}
}

func TestOmitZeroOnlyOnNonPointerScalars(t *testing.T) {
	tb := mustBuild(t)
	_, m := messageOf(t, tb, corev1.PodSpec{})
	byName := map[string]fieldDef{}
	for _, f := range m.fields {
		byName[f.json] = f
	}
	for name, want := range map[string]bool{
		"restartPolicy":                 true,  // string, omitempty
		"terminationGracePeriodSeconds": false, // *int64
		"containers":                    false, // repeated
		"nodeSelector":                  false, // map
		"securityContext":               false, // message
	} {
		if got := byName[name].omitZero; got != want {
			t.Errorf("PodSpec.%s omit_zero %v, want %v", name, got, want)
		}
	}
}

func TestExtraValueIsAList(t *testing.T) {
	tb := mustBuild(t)
	for _, m := range tb.messages {
		if m.t.Name() == "ExtraValue" && (m.form != "List" || m.elem.scalar != "String") {
			t.Errorf("%s: form %s of %+v", typeName(m.t), m.form, m.elem)
		}
	}
}

func TestKindsSortedWithoutListsOrInternal(t *testing.T) {
	tb := mustBuild(t)
	for i, k := range tb.kinds {
		if strings.HasSuffix(k.kind, "List") || k.version == "__internal" {
			t.Errorf("kind %+v should be left out", k)
		}
		if i > 0 {
			p := tb.kinds[i-1]
			if !(p.group < k.group || p.group == k.group && (p.version < k.version || p.version == k.version && p.kind < k.kind)) {
				t.Errorf("kinds out of order: %+v then %+v", p, k)
			}
		}
	}
	pod, _ := messageOf(t, tb, corev1.Pod{})
	found := false
	for _, k := range tb.kinds {
		if k.group == "" && k.version == "v1" && k.kind == "Pod" {
			found = tb.index[k.t] == pod
		}
	}
	if !found {
		t.Error("no v1 Pod kind pointing at the Pod message")
	}
}

func TestVerifyCatchesWrongNumbersAndTypes(t *testing.T) {
	tb := mustBuild(t)
	_, m := messageOf(t, tb, corev1.ConfigMap{})
	m.fields[2].number = 7                       // data
	m.fields[1].ty = valueType{scalar: "String"} // immutable
	m.fields[3].key = valueType{scalar: "Int64"} // binaryData's key
	errs := strings.Join(tb.verify(), "\n")
	for _, want := range []string{
		"ConfigMap.Data (number 7): 0 entries",
		"ConfigMap: Marshal writes field number 2",
		"ConfigMap.Immutable (number 4): wire type 0, the table says bytes",
		"ConfigMap.BinaryData (number 3): map entry wire types 2, 2; the table says varint, bytes",
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("verify does not say %q; it says:\n%s", want, errs)
		}
	}
}

func TestParseProtoWithoutLabel(t *testing.T) {
	wire, n, label, name, err := parseProto("bytes,3,name=fieldManager")
	if err != nil || wire != "bytes" || n != 3 || label != "" || name != "fieldManager" {
		t.Fatalf("got %q %d %q %q %v", wire, n, label, name, err)
	}
}
