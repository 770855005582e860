package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

const (
	// finalizer holds a deleted Memcached until the operator has seen its deletion.
	finalizer = "cache.example.com/finalizer"
	// fieldManager is the field manager of the Deployment's server-side applies.
	fieldManager = "memcached-operator"
	// managedByKey and managedByValue label every memcached Pod; the cache holds only
	// Pods with this label, as ours does.
	managedByKey   = "app.kubernetes.io/managed-by"
	managedByValue = "memcached-operator"
	// instanceKey labels a Pod with the Memcached it belongs to.
	instanceKey = "app.kubernetes.io/instance"
)

// memcachedReconciler does what cmd/memcached-operator/src/reconcile.rs does, in one pass:
//
//  1. a Memcached being deleted gets a Deleting event and loses the finalizer;
//  2. one without the finalizer gets it (a merge patch carrying the resourceVersion), and
//     the pass ends;
//  3. the Deployment is compared with what the spec asks (replicas, image, port, labels,
//     owner) and written when it differs, with an event: a scale alone is an update of the
//     cached Deployment, anything else a server-side apply;
//  4. the status (conditions, observedGeneration, the Pods' names, ready replicas) is
//     computed from the Deployment and the cached Pods and merge-patched through the status
//     subresource when it changed.
//
// Reads come from the manager's cache, writes go to the API server.
type memcachedReconciler struct {
	client.Client
	recorder     events.EventRecorder
	defaultImage string
}

// setupWithManager registers the controller: for Memcached, owning Deployments, and
// watching the memcached Pods (mapped to their Memcached by the instance label).
func (r *memcachedReconciler) setupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&Memcached{}).
		Named("memcached").
		Owns(&appsv1.Deployment{}).
		Watches(&corev1.Pod{}, podOwner()).
		Complete(r)
}

// Reconcile brings one Memcached and its Deployment in step.
func (r *memcachedReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	mc := &Memcached{}
	if err := r.Get(ctx, req.NamespacedName, mc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}

	// 1. Being deleted: say so, and let go.
	if !mc.DeletionTimestamp.IsZero() {
		if controllerutil.ContainsFinalizer(mc, finalizer) {
			r.recorder.Eventf(mc, nil, corev1.EventTypeWarning, "Deleting", "DeleteCR",
				"Custom Resource %s is being deleted from the namespace %s", mc.Name, mc.Namespace)
			base := mc.DeepCopy()
			controllerutil.RemoveFinalizer(mc, finalizer)
			if err := r.Patch(ctx, mc, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
				return ctrl.Result{}, err
			}
		}
		return ctrl.Result{}, nil
	}

	// 2. Hold deletions until we have seen them.
	if !controllerutil.ContainsFinalizer(mc, finalizer) {
		base := mc.DeepCopy()
		controllerutil.AddFinalizer(mc, finalizer)
		return ctrl.Result{}, r.Patch(ctx, mc, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	}

	// 3. The Deployment, as the spec asks.
	image := r.defaultImage
	if mc.Spec.Image != nil {
		image = *mc.Spec.Image
	}
	var have *appsv1.Deployment
	cached := &appsv1.Deployment{}
	switch err := r.Get(ctx, req.NamespacedName, cached); {
	case err == nil:
		have = cached
	case !apierrors.IsNotFound(err):
		return ctrl.Result{}, err
	}
	var ready int32
	if have != nil {
		ready = have.Status.ReadyReplicas
	}
	if have == nil || differs(have, mc, image) {
		written, err := r.writeDeployment(ctx, mc, have, image)
		if err != nil {
			r.recorder.Eventf(mc, nil, corev1.EventTypeWarning, "FailedWrite", "ApplyDeployment",
				"Failed to write Deployment %s/%s: %v", mc.Namespace, mc.Name, err)
			status := statusFor(mc, ready, nil, &fault{conditionDegraded, true, "DeploymentWriteFailed", err.Error()})
			if werr := r.writeStatus(ctx, mc, status); werr != nil {
				return ctrl.Result{}, werr
			}
			return ctrl.Result{}, err
		}
		r.announce(ctx, mc, have)
		ready = written
	}

	// 4. The status, from what runs.
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(mc.Namespace), client.MatchingLabels(labelsFor(mc.Name))); err != nil {
		return ctrl.Result{}, err
	}
	// Pods on their way out no longer count.
	nodes := make([]string, 0, len(pods.Items))
	for i := range pods.Items {
		if pods.Items[i].DeletionTimestamp == nil {
			nodes = append(nodes, pods.Items[i].Name)
		}
	}
	slices.Sort(nodes)
	return ctrl.Result{}, r.writeStatus(ctx, mc, statusFor(mc, ready, nodes, nil))
}

// writeDeployment writes the Deployment as ours does and returns its ready replicas. A scale
// alone is an update of the cached Deployment with the new replicas, as the kubebuilder sample
// writes it, carrying the cached resourceVersion; on a conflict (the cache was behind) a merge
// patch of spec.replicas alone does it instead. Anything else, or a Deployment not there yet,
// is a server-side apply.
func (r *memcachedReconciler) writeDeployment(ctx context.Context, mc *Memcached, have *appsv1.Deployment, image string) (int32, error) {
	if have != nil {
		scaled := have.DeepCopy()
		scaled.Spec.Replicas = new(mc.Spec.size())
		if !differs(scaled, mc, image) {
			err := r.Update(ctx, scaled, client.FieldOwner(fieldManager))
			if apierrors.IsConflict(err) {
				scaled = have.DeepCopy()
				patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, mc.Spec.size())
				err = r.Patch(ctx, scaled, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(fieldManager))
			}
			return scaled.Status.ReadyReplicas, err
		}
	}
	want := deploymentFor(mc, image)
	if err := r.Apply(ctx, want, client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
		return 0, err
	}
	if want.Status != nil && want.Status.ReadyReplicas != nil {
		return *want.Status.ReadyReplicas, nil
	}
	return 0, nil
}

// podOwner maps a memcached Pod to the Memcached named by its instance label.
func podOwner() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		instance, ok := o.GetLabels()[instanceKey]
		if !ok {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: instance}}}
	})
}

// labelsFor is the label set of one Memcached's Pods: unique per Memcached.
func labelsFor(name string) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name": "memcached",
		instanceKey:              name,
		managedByKey:             managedByValue,
	}
}

// ownerReference is the controller reference a Memcached's Deployment carries.
func ownerReference(mc *Memcached) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         groupVersion.String(),
		Kind:               "Memcached",
		Name:               mc.Name,
		UID:                mc.UID,
		Controller:         new(true),
		BlockOwnerDeletion: new(true),
	}
}

// deploymentFor is the Deployment the Memcached asks for, as an apply configuration: named
// after it, owned by it, its Pods restricted (non-root, seccomp RuntimeDefault, no privilege
// escalation, no capabilities); the same object ours applies.
func deploymentFor(mc *Memcached, image string) *appsv1ac.DeploymentApplyConfiguration {
	labels := labelsFor(mc.Name)
	owner := ownerReference(mc)
	return appsv1ac.Deployment(mc.Name, mc.Namespace).
		WithLabels(labels).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(owner.APIVersion).WithKind(owner.Kind).WithName(owner.Name).WithUID(owner.UID).
			WithController(true).WithBlockOwnerDeletion(true)).
		WithSpec(appsv1ac.DeploymentSpec().
			WithReplicas(mc.Spec.size()).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(labels).
				WithSpec(corev1ac.PodSpec().
					WithSecurityContext(corev1ac.PodSecurityContext().
						WithRunAsNonRoot(true).
						WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))).
					WithContainers(corev1ac.Container().
						WithName("memcached").
						WithImage(image).
						WithImagePullPolicy(corev1.PullIfNotPresent).
						WithCommand("memcached", "--memory-limit=64", "-o", "modern", "-v").
						WithPorts(corev1ac.ContainerPort().WithContainerPort(mc.Spec.ContainerPort).WithName("memcached")).
						WithSecurityContext(corev1ac.SecurityContext().
							WithRunAsNonRoot(true).
							WithRunAsUser(1001).
							WithAllowPrivilegeEscalation(false).
							WithCapabilities(corev1ac.Capabilities().WithDrop("ALL")))))))
}

// differs reports whether the Deployment lacks something the operator sets: its replicas,
// image, port, labels or owner. Fields the server defaults are not compared.
func differs(have *appsv1.Deployment, mc *Memcached, image string) bool {
	if have.Spec.Replicas == nil || *have.Spec.Replicas != mc.Spec.size() {
		return true
	}
	containers := have.Spec.Template.Spec.Containers
	if len(containers) == 0 || containers[0].Image != image {
		return true
	}
	ports := containers[0].Ports
	if len(ports) != 1 || ports[0].ContainerPort != mc.Spec.ContainerPort || ports[0].Name != "memcached" {
		return true
	}
	if !equality.Semantic.DeepEqual(have.Labels, labelsFor(mc.Name)) {
		return true
	}
	return !equality.Semantic.DeepEqual(have.OwnerReferences, []metav1.OwnerReference{ownerReference(mc)})
}

// announce records what a write of the Deployment did, as an event and a log line.
func (r *memcachedReconciler) announce(ctx context.Context, mc *Memcached, have *appsv1.Deployment) {
	want := mc.Spec.size()
	var reason, action, note string
	switch {
	case have == nil:
		reason, action = "Created", "CreateDeployment"
		note = fmt.Sprintf("Created Deployment %s with %d replicas", mc.Name, want)
	case have.Spec.Replicas == nil || *have.Spec.Replicas != want:
		old := int32(1)
		if have.Spec.Replicas != nil {
			old = *have.Spec.Replicas
		}
		reason, action = "Scaled", "ScaleDeployment"
		note = fmt.Sprintf("Scaled Deployment %s from %d to %d replicas", mc.Name, old, want)
	default:
		reason, action = "Updated", "UpdateDeployment"
		note = fmt.Sprintf("Updated Deployment %s to match the spec", mc.Name)
	}
	logf.FromContext(ctx).Info(note, "reason", reason)
	r.recorder.Eventf(mc, nil, corev1.EventTypeNormal, reason, action, "%s", note)
}

// fault is a failure to write the Deployment, reported as a condition.
type fault struct {
	conditionType string
	status        bool
	reason        string
	message       string
}

// statusFor is the status that describes ready replicas and Pods named nodes, or a failure
// to write the Deployment; the same conditions, reasons and messages as ours.
func statusFor(mc *Memcached, ready int32, nodes []string, f *fault) MemcachedStatus {
	size := mc.Spec.size()
	generation := mc.Generation
	old := MemcachedStatus{}
	mc.Status.deepCopyInto(&old)
	conditions := old.Conditions
	set := func(conditionType string, status bool, reason, message string) {
		s := metav1.ConditionFalse
		if status {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&conditions, metav1.Condition{
			Type: conditionType, Status: s, Reason: reason, Message: message, ObservedGeneration: generation,
		})
	}
	counted := fmt.Sprintf("%d of %d memcached pods are ready", ready, size)
	if ready >= size {
		set(conditionAvailable, true, "PodsReady", counted)
		set(conditionProgressing, false, "Stable", counted)
	} else {
		set(conditionAvailable, false, "PodsNotReady", counted)
		set(conditionProgressing, true, "PodsStarting", counted)
	}
	if f != nil {
		set(f.conditionType, f.status, f.reason, f.message)
		nodes = old.Nodes
	} else {
		set(conditionDegraded, false, "Reconciled", "the Deployment matches the spec")
	}
	if nodes == nil {
		nodes = []string{}
	}
	return MemcachedStatus{
		Conditions:         conditions,
		ObservedGeneration: &generation,
		Nodes:              nodes,
		ReadyReplicas:      &ready,
	}
}

// writeStatus merge-patches status through the status subresource, unless it is what the
// Memcached shows.
func (r *memcachedReconciler) writeStatus(ctx context.Context, mc *Memcached, status MemcachedStatus) error {
	if equality.Semantic.DeepEqual(mc.Status, status) {
		return nil
	}
	body, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	return r.Status().Patch(ctx, mc, client.RawPatch(types.MergePatchType, body))
}
