package main

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// groupVersion is the Memcached kind's group and version, as our CRD serves them
// (cmd/memcached-operator/src/api.rs; config/crd/bases/cache.example.com_memcacheds.yaml).
var groupVersion = schema.GroupVersion{Group: "cache.example.com", Version: "v1alpha1"}

const (
	// defaultSize is the size of a Memcached whose spec leaves it out, as ours reads it.
	defaultSize int32 = 1

	// Condition types the status reports, as ours does.
	conditionAvailable   = "Available"
	conditionProgressing = "Progressing"
	conditionDegraded    = "Degraded"
)

// Memcached is the cache.example.com/v1alpha1 Memcached: the same fields as our Rust type,
// written by hand (no controller-gen) for the head-to-head.
type Memcached struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MemcachedSpec   `json:"spec,omitempty"`
	Status MemcachedStatus `json:"status,omitempty"`
}

// MemcachedSpec is the desired state of a memcached cluster.
type MemcachedSpec struct {
	// Size is how many memcached Pods to run; nil reads as defaultSize.
	Size *int32 `json:"size,omitempty"`
	// ContainerPort is the port memcached listens on (the CRD defaults it to 11211).
	ContainerPort int32 `json:"containerPort,omitempty"`
	// Image is the memcached image; the operator's -memcached-image when nil.
	Image *string `json:"image,omitempty"`
}

// size is the size asked for, or defaultSize.
func (s *MemcachedSpec) size() int32 {
	if s.Size == nil {
		return defaultSize
	}
	return *s.Size
}

// MemcachedStatus is what the operator last saw of a memcached cluster.
type MemcachedStatus struct {
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	ObservedGeneration *int64             `json:"observedGeneration,omitempty"`
	// Nodes is always written, empty too (never null): the status goes out as a merge
	// patch, where a missing or null list would keep or delete the old one.
	Nodes         []string `json:"nodes"`
	ReadyReplicas *int32   `json:"readyReplicas,omitempty"`
}

// MemcachedList is a list of Memcached, for the cache's list and watch.
type MemcachedList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Memcached `json:"items"`
}

// addToScheme registers Memcached and MemcachedList under groupVersion.
func addToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(groupVersion, &Memcached{}, &MemcachedList{})
	metav1.AddToGroupVersion(s, groupVersion)
	return nil
}

// DeepCopyInto copies in into out, sharing nothing.
func (in *Memcached) DeepCopyInto(out *Memcached) {
	*out = *in
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	in.Spec.deepCopyInto(&out.Spec)
	in.Status.deepCopyInto(&out.Status)
}

// DeepCopy returns a copy of in sharing nothing with it.
func (in *Memcached) DeepCopy() *Memcached {
	if in == nil {
		return nil
	}
	out := new(Memcached)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *Memcached) DeepCopyObject() runtime.Object {
	return in.DeepCopy()
}

func (in *MemcachedSpec) deepCopyInto(out *MemcachedSpec) {
	*out = *in
	if in.Size != nil {
		out.Size = new(*in.Size)
	}
	if in.Image != nil {
		out.Image = new(*in.Image)
	}
}

func (in *MemcachedStatus) deepCopyInto(out *MemcachedStatus) {
	*out = *in
	if in.Conditions != nil {
		out.Conditions = make([]metav1.Condition, len(in.Conditions))
		for i := range in.Conditions {
			in.Conditions[i].DeepCopyInto(&out.Conditions[i])
		}
	}
	if in.ObservedGeneration != nil {
		out.ObservedGeneration = new(*in.ObservedGeneration)
	}
	if in.Nodes != nil {
		out.Nodes = append([]string(nil), in.Nodes...)
		if len(in.Nodes) == 0 {
			out.Nodes = []string{}
		}
	}
	if in.ReadyReplicas != nil {
		out.ReadyReplicas = new(*in.ReadyReplicas)
	}
}

// DeepCopyInto copies in into out, sharing nothing.
func (in *MemcachedList) DeepCopyInto(out *MemcachedList) {
	*out = *in
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]Memcached, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopyObject implements runtime.Object.
func (in *MemcachedList) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := new(MemcachedList)
	in.DeepCopyInto(out)
	return out
}
