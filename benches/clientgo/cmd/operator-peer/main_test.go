package main

import (
	"encoding/json"
	"flag"
	"io"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func memcached(size int32) *Memcached {
	return &Memcached{
		ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: "prod", UID: types.UID("u-1"), Generation: 2},
		Spec:       MemcachedSpec{Size: &size, ContainerPort: 11211},
	}
}

// applied is the Deployment the server would hold after applying deploymentFor, as the
// cache reads it back (with a server default set, which differs must ignore).
func applied(t *testing.T, mc *Memcached, image string) *appsv1.Deployment {
	t.Helper()
	body, err := json.Marshal(deploymentFor(mc, image))
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := json.Unmarshal(body, &d); err != nil {
		t.Fatal(err)
	}
	d.Spec.Template.Spec.Containers[0].Ports[0].Protocol = corev1.ProtocolTCP
	d.Spec.RevisionHistoryLimit = new(int32(10))
	return &d
}

func TestTheAppliedDeploymentIsWhatTheSpecAsks(t *testing.T) {
	mc := memcached(3)
	d := applied(t, mc, "memcached:1")
	if *d.Spec.Replicas != 3 || d.Spec.Template.Spec.Containers[0].Image != "memcached:1" {
		t.Fatalf("replicas %d, image %q", *d.Spec.Replicas, d.Spec.Template.Spec.Containers[0].Image)
	}
	if got := d.Spec.Selector.MatchLabels[instanceKey]; got != "cache" {
		t.Fatalf("selector instance %q", got)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if *c.SecurityContext.RunAsUser != 1001 || *c.SecurityContext.AllowPrivilegeEscalation || c.SecurityContext.Capabilities.Drop[0] != "ALL" {
		t.Fatalf("security context %+v", c.SecurityContext)
	}
	if d.OwnerReferences[0].UID != "u-1" || !*d.OwnerReferences[0].Controller {
		t.Fatalf("owner %+v", d.OwnerReferences)
	}
}

func TestServerDefaultsAreNoDifference(t *testing.T) {
	mc := memcached(3)
	if differs(applied(t, mc, "memcached:1"), mc, "memcached:1") {
		t.Fatal("an unchanged Deployment differs")
	}
}

func TestSizeImagePortAndOwnerChangesAreDifferences(t *testing.T) {
	mc := memcached(3)
	scaled := memcached(1)
	otherPort := memcached(3)
	otherPort.Spec.ContainerPort = 11212
	otherOwner := memcached(3)
	otherOwner.UID = "u-2"
	for name, have := range map[string]*appsv1.Deployment{
		"size":  applied(t, scaled, "memcached:1"),
		"image": applied(t, mc, "memcached:2"),
		"port":  applied(t, otherPort, "memcached:1"),
		"owner": applied(t, otherOwner, "memcached:1"),
	} {
		if !differs(have, mc, "memcached:1") {
			t.Errorf("a different %s is no difference", name)
		}
	}
}

func TestStatusReportsReadinessAndKeepsTransitionTimes(t *testing.T) {
	mc := memcached(2)
	status := statusFor(mc, 1, []string{"a"}, nil)
	if len(status.Conditions) != 3 || status.Conditions[0].Type != conditionAvailable ||
		status.Conditions[0].Status != metav1.ConditionFalse || status.Conditions[0].Message != "1 of 2 memcached pods are ready" {
		t.Fatalf("conditions %+v", status.Conditions)
	}
	if *status.ObservedGeneration != 2 || *status.ReadyReplicas != 1 || status.Nodes[0] != "a" {
		t.Fatalf("status %+v", status)
	}
	// Written, read back: the same facts compute the same status, so nothing is written.
	mc.Status = status
	again := statusFor(mc, 1, []string{"a"}, nil)
	if !equalStatus(mc.Status, again) {
		t.Fatalf("a second pass changed the status: %+v", again)
	}
	// Ready: Available turns true with a new transition time; the message changes.
	ready := statusFor(mc, 2, []string{"a", "b"}, nil)
	if ready.Conditions[0].Status != metav1.ConditionTrue || ready.Conditions[0].Reason != "PodsReady" {
		t.Fatalf("ready %+v", ready.Conditions[0])
	}
}

func equalStatus(a, b MemcachedStatus) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func TestEmptyNodesAreWrittenAsAnEmptyList(t *testing.T) {
	body, err := json.Marshal(map[string]any{"status": statusFor(memcached(0), 0, nil, nil)})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Status map[string]json.RawMessage `json:"status"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if string(got.Status["nodes"]) != "[]" {
		t.Fatalf("nodes %s", got.Status["nodes"])
	}
}

func TestDeepCopySharesNothing(t *testing.T) {
	mc := memcached(1)
	mc.Status = statusFor(mc, 0, []string{"a"}, nil)
	cp := mc.DeepCopy()
	*cp.Spec.Size = 5
	cp.Status.Nodes[0] = "b"
	cp.Status.Conditions[0].Message = "changed"
	*cp.Status.ReadyReplicas = 9
	if *mc.Spec.Size != 1 || mc.Status.Nodes[0] != "a" || mc.Status.Conditions[0].Message == "changed" || *mc.Status.ReadyReplicas != 0 {
		t.Fatalf("the copy shares state: %+v", mc)
	}
	list := &MemcachedList{Items: []Memcached{*mc}}
	lcp := list.DeepCopyObject().(*MemcachedList)
	lcp.Items[0].Name = "other"
	if list.Items[0].Name != "cache" {
		t.Fatal("the list copy shares items")
	}
}

func TestFlagsFollowOursAndTheCacheSelectsMemcachedPods(t *testing.T) {
	fs := flag.NewFlagSet("operator-peer", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f, _, err := parseFlags(fs, []string{"--namespace=prod", "--metrics-bind-address=127.0.0.1:9000"},
		func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if f.metricsAddr != "127.0.0.1:9000" || f.probeAddr != ":8081" || f.image != defaultImage || f.leaderElect {
		t.Fatalf("flags %+v", f)
	}
	o := cacheOptions(f)
	if _, ok := o.DefaultNamespaces["prod"]; !ok || len(o.DefaultNamespaces) != 1 {
		t.Fatalf("namespaces %v", o.DefaultNamespaces)
	}
	var pods client.Object
	for obj := range o.ByObject {
		pods = obj
	}
	if _, ok := pods.(*corev1.Pod); !ok || o.ByObject[pods].Label.String() != managedByKey+"="+managedByValue {
		t.Fatalf("by object %v", o.ByObject)
	}
	fs = flag.NewFlagSet("operator-peer", flag.ContinueOnError)
	f, _, _ = parseFlags(fs, nil, func(string) string { return "example.com/memcached:2" })
	if f.image != "example.com/memcached:2" || cacheOptions(f).DefaultNamespaces != nil {
		t.Fatalf("from the environment: %+v", f)
	}
}
