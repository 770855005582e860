//! `#[derive(CustomResource)]`: a custom resource kind and its CustomResourceDefinition from
//! the spec struct, for the `controller-runtime` crate (which re-exports it as
//! `controller_runtime::CustomResource`).
//!
//! The derive reads one `#[resource(..)]` attribute and writes the kind's struct, its
//! k8s-openapi trait impls and its `controller_runtime::runtime::crd::CustomResource` impl;
//! the schema work happens at run time, in `controller_runtime::runtime::crd`, from the
//! types' `schemars::JsonSchema`.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::quote;
use syn::meta::ParseNestedMeta;
use syn::{DeriveInput, Ident, LitInt, LitStr, Path, Type};

/// Derives a custom resource kind from its spec type.
///
/// ```
/// use controller_runtime::CustomResource;
/// use schemars::JsonSchema;
/// use serde::{Deserialize, Serialize};
///
/// /// The desired state of a Memcached cluster.
/// #[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
/// #[resource(group = "cache.example.com", version = "v1alpha1", kind = "Memcached",
///            namespaced, shortname = "mc", status = "MemcachedStatus",
///            printcolumn(name = "Size", type = "integer", json_path = ".spec.size"),
///            printcolumn(name = "Age", type = "date", json_path = ".metadata.creationTimestamp"))]
/// #[serde(rename_all = "camelCase")]
/// pub struct MemcachedSpec {
///     /// Number of memcached pods.
///     #[schemars(range(min = 0, max = 10))]
///     pub size: i32,
///     /// The port memcached listens on.
///     #[serde(default = "default_port")]
///     pub container_port: i32,
///     /// The image to run.
///     pub image: Option<String>,
/// }
///
/// fn default_port() -> i32 {
///     11211
/// }
///
/// /// What the operator last saw.
/// #[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
/// pub struct MemcachedStatus {
///     /// Pods ready.
///     pub ready: i32,
/// }
///
/// let mut mc = Memcached::new("cache", MemcachedSpec { size: 3, ..Default::default() });
/// mc.status = Some(MemcachedStatus { ready: 1 });
/// assert_eq!(Memcached::crd().spec.names.plural, "memcacheds");
/// ```
///
/// # What it generates
///
/// For a spec type `MemcachedSpec` and `kind = "Memcached"`, with the spec's visibility:
///
/// - `struct Memcached { pub metadata: ObjectMeta, pub spec: MemcachedSpec, pub status:
///   Option<MemcachedStatus> }` (no `status` field without a `status` attribute), deriving
///   `Clone` and `Debug` (and whatever `derive = ".."` names). It serializes as the API
///   server expects: `apiVersion` and `kind` first, then `metadata`, `spec`, and `status`
///   unless it is `None`; it deserializes ignoring `apiVersion` and `kind`.
/// - `Memcached::new(name: &str, spec: MemcachedSpec) -> Memcached`.
/// - `k8s_openapi::Resource` (`API_VERSION`, `GROUP`, `KIND`, `VERSION`,
///   `URL_PATH_SEGMENT` = the plural, `Scope` = `NamespaceResourceScope` or
///   `ClusterResourceScope`), `k8s_openapi::ListableResource` (`LIST_KIND` =
///   `MemcachedList`) and `k8s_openapi::Metadata<Ty = ObjectMeta>`: so `Api<Memcached>`,
///   `Api<Raw<Memcached>>` and informers take it.
/// - `controller_runtime::runtime::crd::CustomResource`, whose `Memcached::crd()` builds the
///   CustomResourceDefinition.
/// - With a `status` attribute, `controller_runtime::runtime::status::HasStatus`, for the
///   status helpers.
///
/// The spec (and status) types must implement `Serialize`, `Deserialize`, `JsonSchema`,
/// `Clone` and `Debug`.
///
/// A kind served in several versions has one derived type per version, each with the same
/// group, kind and names and its own `version`, joined into one CRD by
/// `controller_runtime::runtime::crd::merge`.
///
/// # Attributes
///
/// All in one `#[resource(..)]` (several `#[resource]` attributes add up):
///
/// | attribute | meaning |
/// |---|---|
/// | `group = "cache.example.com"` | required; the API group, a lowercase DNS subdomain with a dot |
/// | `version = "v1alpha1"` | required; the version, a lowercase DNS label |
/// | `kind = "Memcached"` | required; the kind, and the name of the generated struct |
/// | `namespaced` | objects live in namespaces (without it, the kind is cluster-scoped) |
/// | `status = "MemcachedStatus"` | the status type; adds the `status` field and subresource |
/// | `plural = "memcacheds"` | the resource name; default: the lowercase kind, pluralized in English |
/// | `singular = "memcached"` | default: the lowercase kind |
/// | `shortname = "mc"` | a short name for kubectl; repeatable |
/// | `category = "all"` | a category (`kubectl get all`); repeatable |
/// | `printcolumn(name = "Size", type = "integer", json_path = ".spec.size")` | a `kubectl get` column; also `description = ".."`, `format = ".."`, `priority = 1`; repeatable |
/// | `scale(spec_replicas_path = ".spec.size", status_replicas_path = ".status.readyReplicas")` | the `scale` subresource, for `kubectl scale` and autoscalers: the paths of the desired and observed replicas (under `.spec` and `.status`); also `label_selector_path = ".status.selector"`, the path of the Pods' label selector as a string, which an autoscaler needs |
/// | `derive = "PartialEq"` | another derive for the generated struct; repeatable |
/// | `crate = "::controller_runtime"` | where the runtime crate is (inside it: `crate = "crate"`) |
#[proc_macro_derive(CustomResource, attributes(resource))]
pub fn derive_custom_resource(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(tokens) => tokens.into(),
        Err(err) => err.into_compile_error().into(),
    }
}

/// A printer column as written in the attribute.
struct Column {
    name: String,
    column_type: String,
    json_path: String,
    description: Option<String>,
    format: Option<String>,
    priority: i32,
}

/// The `#[resource(..)]` attributes, parsed.
#[derive(Default)]
struct Attrs {
    group: Option<LitStr>,
    version: Option<LitStr>,
    kind: Option<LitStr>,
    plural: Option<LitStr>,
    singular: Option<LitStr>,
    namespaced: bool,
    status: Option<Type>,
    short_names: Vec<LitStr>,
    categories: Vec<LitStr>,
    columns: Vec<Column>,
    derives: Vec<Path>,
    krate: Option<Path>,
    scale: Option<ScaleAttr>,
}

impl Attrs {
    fn parse(input: &DeriveInput) -> syn::Result<Attrs> {
        let mut attrs = Attrs::default();
        let mut seen = false;
        for attr in input.attrs.iter().filter(|a| a.path().is_ident("resource")) {
            seen = true;
            attr.parse_nested_meta(|meta| attrs.parse_one(meta))?;
        }
        if !seen {
            return Err(syn::Error::new(
                Span::call_site(),
                "#[derive(CustomResource)] needs #[resource(group = \"..\", version = \"..\", kind = \"..\")]",
            ));
        }
        Ok(attrs)
    }

    fn parse_one(&mut self, meta: ParseNestedMeta<'_>) -> syn::Result<()> {
        let once = |slot: &mut Option<LitStr>, meta: &ParseNestedMeta<'_>| -> syn::Result<()> {
            if slot.is_some() {
                return Err(meta.error("given twice"));
            }
            *slot = Some(meta.value()?.parse()?);
            Ok(())
        };
        let path = &meta.path;
        if path.is_ident("group") {
            once(&mut self.group, &meta)
        } else if path.is_ident("version") {
            once(&mut self.version, &meta)
        } else if path.is_ident("kind") {
            once(&mut self.kind, &meta)
        } else if path.is_ident("plural") {
            once(&mut self.plural, &meta)
        } else if path.is_ident("singular") {
            once(&mut self.singular, &meta)
        } else if path.is_ident("namespaced") {
            self.namespaced = true;
            Ok(())
        } else if path.is_ident("status") {
            let lit: LitStr = meta.value()?.parse()?;
            self.status = Some(lit.parse()?);
            Ok(())
        } else if path.is_ident("shortname") {
            self.short_names.push(meta.value()?.parse()?);
            Ok(())
        } else if path.is_ident("category") {
            self.categories.push(meta.value()?.parse()?);
            Ok(())
        } else if path.is_ident("derive") {
            let lit: LitStr = meta.value()?.parse()?;
            self.derives.push(lit.parse()?);
            Ok(())
        } else if path.is_ident("crate") {
            let lit: LitStr = meta.value()?.parse()?;
            self.krate = Some(lit.parse()?);
            Ok(())
        } else if path.is_ident("printcolumn") {
            self.columns.push(parse_column(&meta)?);
            Ok(())
        } else if path.is_ident("scale") {
            if self.scale.is_some() {
                return Err(meta.error("given twice"));
            }
            self.scale = Some(parse_scale(&meta)?);
            Ok(())
        } else {
            Err(meta.error(
                "unknown attribute; expected one of group, version, kind, namespaced, status, \
                 plural, singular, shortname, category, printcolumn, scale, derive, crate",
            ))
        }
    }
}

fn parse_column(meta: &ParseNestedMeta<'_>) -> syn::Result<Column> {
    let (mut name, mut column_type, mut json_path) = (None, None, None);
    let (mut description, mut format, mut priority) = (None, None, 0);
    meta.parse_nested_meta(|inner| {
        let string = || -> syn::Result<String> { Ok(inner.value()?.parse::<LitStr>()?.value()) };
        if inner.path.is_ident("name") {
            name = Some(string()?);
        } else if inner.path.is_ident("type") {
            let ty = string()?;
            if !matches!(
                ty.as_str(),
                "integer" | "number" | "string" | "boolean" | "date"
            ) {
                return Err(
                    inner.error("a column's type is integer, number, string, boolean or date")
                );
            }
            column_type = Some(ty);
        } else if inner.path.is_ident("json_path") {
            let path = string()?;
            if !path.starts_with('.') {
                return Err(inner.error("a column's json_path starts with a dot: \".spec.size\""));
            }
            json_path = Some(path);
        } else if inner.path.is_ident("description") {
            description = Some(string()?);
        } else if inner.path.is_ident("format") {
            format = Some(string()?);
        } else if inner.path.is_ident("priority") {
            priority = inner.value()?.parse::<LitInt>()?.base10_parse()?;
        } else {
            return Err(inner.error(
                "unknown column attribute; expected name, type, json_path, description, format \
                 or priority",
            ));
        }
        Ok(())
    })?;
    let missing = |what: &str| meta.error(format!("printcolumn needs {what} = \"..\""));
    Ok(Column {
        name: name.ok_or_else(|| missing("name"))?,
        column_type: column_type.ok_or_else(|| missing("type"))?,
        json_path: json_path.ok_or_else(|| missing("json_path"))?,
        description,
        format,
        priority,
    })
}

/// The `scale(..)` attribute: the paths of the `scale` subresource.
struct ScaleAttr {
    spec_replicas_path: String,
    status_replicas_path: String,
    label_selector_path: Option<String>,
}

/// Parses `scale(spec_replicas_path = "..", status_replicas_path = "..",
/// label_selector_path = "..")`, refusing paths the API server would refuse: each a plain
/// JSON path (no array index) under `.spec` (the desired replicas), `.status` (the observed
/// replicas) and `.status` or `.spec` (the label selector).
fn parse_scale(meta: &ParseNestedMeta<'_>) -> syn::Result<ScaleAttr> {
    let (mut spec, mut status, mut selector) = (None, None, None);
    meta.parse_nested_meta(|inner| {
        let (slot, roots, under): (&mut Option<String>, &[&str], &str) =
            if inner.path.is_ident("spec_replicas_path") {
                (&mut spec, &[".spec."], ".spec")
            } else if inner.path.is_ident("status_replicas_path") {
                (&mut status, &[".status."], ".status")
            } else if inner.path.is_ident("label_selector_path") {
                (&mut selector, &[".status.", ".spec."], ".status or .spec")
            } else {
                return Err(inner.error(
                    "unknown scale attribute; expected spec_replicas_path, \
                     status_replicas_path or label_selector_path",
                ));
            };
        if slot.is_some() {
            return Err(inner.error("given twice"));
        }
        let lit: LitStr = inner.value()?.parse()?;
        let path = lit.value();
        let plain = path
            .split('.')
            .skip(1)
            .all(|field| !field.is_empty() && !field.contains(['[', ']', ' ', '*']));
        if !roots.iter().any(|root| path.starts_with(root)) || !plain {
            return Err(syn::Error::new(
                lit.span(),
                format!("{path:?} is not a JSON path of fields under {under} (no array index)"),
            ));
        }
        *slot = Some(path);
        Ok(())
    })?;
    let missing = |what: &str| meta.error(format!("scale needs {what} = \"..\""));
    Ok(ScaleAttr {
        spec_replicas_path: spec.ok_or_else(|| missing("spec_replicas_path"))?,
        status_replicas_path: status.ok_or_else(|| missing("status_replicas_path"))?,
        label_selector_path: selector,
    })
}

/// The `KindInfo::scale` value of the attribute.
fn scale_tokens(scale: Option<&ScaleAttr>, crd: &TokenStream2) -> TokenStream2 {
    let Some(ScaleAttr {
        spec_replicas_path,
        status_replicas_path,
        label_selector_path,
    }) = scale
    else {
        return quote!(::core::option::Option::None);
    };
    let label_selector_path = option_str(label_selector_path.as_deref());
    quote! {
        ::core::option::Option::Some(#crd::Scale {
            spec_replicas_path: #spec_replicas_path,
            status_replicas_path: #status_replicas_path,
            label_selector_path: #label_selector_path,
        })
    }
}

/// Whether `s` is a lowercase RFC 1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63.
fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// The English plural of a lowercase kind, as Kubernetes tooling forms it.
fn pluralize(singular: &str) -> String {
    let consonant_y = singular.ends_with('y')
        && !singular.ends_with("ay")
        && !singular.ends_with("ey")
        && !singular.ends_with("oy")
        && !singular.ends_with("uy");
    if consonant_y {
        format!("{}ies", &singular[..singular.len() - 1])
    } else if ["s", "x", "z", "ch", "sh"]
        .iter()
        .any(|end| singular.ends_with(end))
    {
        format!("{singular}es")
    } else {
        format!("{singular}s")
    }
}

fn required(slot: Option<LitStr>, what: &str) -> syn::Result<LitStr> {
    slot.ok_or_else(|| {
        syn::Error::new(
            Span::call_site(),
            format!("#[resource(..)] needs {what} = \"..\""),
        )
    })
}

fn expand(input: &DeriveInput) -> syn::Result<TokenStream2> {
    if !input.generics.params.is_empty() || input.generics.where_clause.is_some() {
        return Err(syn::Error::new_spanned(
            &input.generics,
            "a custom resource's spec type cannot be generic",
        ));
    }
    let attrs = Attrs::parse(input)?;
    let group_lit = required(attrs.group, "group")?;
    let version_lit = required(attrs.version, "version")?;
    let kind_lit = required(attrs.kind, "kind")?;
    let (group, version, kind) = (group_lit.value(), version_lit.value(), kind_lit.value());

    if !group.contains('.') || group.len() > 253 || !group.split('.').all(is_dns_label) {
        return Err(syn::Error::new(
            group_lit.span(),
            "a CRD's group is a lowercase DNS subdomain with at least one dot (cache.example.com)",
        ));
    }
    let version_ok =
        is_dns_label(&version) && version.starts_with(|c: char| c.is_ascii_lowercase());
    if !version_ok {
        return Err(syn::Error::new(
            version_lit.span(),
            "a version is a lowercase DNS label starting with a letter (v1alpha1)",
        ));
    }
    let kind_ident: Ident = syn::parse_str(&kind).map_err(|_| {
        syn::Error::new(
            kind_lit.span(),
            "a kind is a Rust identifier in CamelCase (Memcached)",
        )
    })?;
    if !kind.starts_with(|c: char| c.is_ascii_uppercase()) {
        return Err(syn::Error::new(
            kind_lit.span(),
            "a kind starts with an uppercase letter",
        ));
    }
    let singular = match &attrs.singular {
        Some(lit) => lit.value(),
        None => kind.to_ascii_lowercase(),
    };
    let plural = match &attrs.plural {
        Some(lit) => lit.value(),
        None => pluralize(&kind.to_ascii_lowercase()),
    };
    for (value, span, what) in [
        (
            &singular,
            attrs
                .singular
                .as_ref()
                .map_or(kind_lit.span(), LitStr::span),
            "singular",
        ),
        (
            &plural,
            attrs.plural.as_ref().map_or(kind_lit.span(), LitStr::span),
            "plural",
        ),
    ] {
        if !is_dns_label(value) {
            return Err(syn::Error::new(
                span,
                format!("the {what} name {value:?} is not a lowercase DNS label"),
            ));
        }
    }
    for lit in attrs.short_names.iter().chain(&attrs.categories) {
        if !is_dns_label(&lit.value()) {
            return Err(syn::Error::new(lit.span(), "not a lowercase DNS label"));
        }
    }

    let krate = attrs
        .krate
        .unwrap_or_else(|| syn::parse_quote!(::controller_runtime));
    let crd = quote!(#krate::runtime::crd);
    let private = quote!(#crd::__private);
    let k8s = quote!(#private::k8s_openapi);
    let serde = quote!(#private::serde);
    let serde_crate =
        format!("{}::runtime::crd::__private::serde", quote!(#krate)).replace(' ', "");
    let object_meta = quote!(#k8s::apimachinery::pkg::apis::meta::v1::ObjectMeta);

    let vis = &input.vis;
    let spec = &input.ident;
    let api_version = format!("{group}/{version}");
    let list_kind = format!("{kind}List");
    let crd_name = format!("{plural}.{group}");
    let scope = if attrs.namespaced {
        quote!(#k8s::NamespaceResourceScope)
    } else {
        quote!(#k8s::ClusterResourceScope)
    };
    let derives = &attrs.derives;

    let doc = format!(
        "The `{kind}` custom resource ({api_version}, {scope}), generated from [`{spec}`] by \
         `#[derive(CustomResource)]`. Its CustomResourceDefinition is `{crd_name}`.",
        scope = if attrs.namespaced {
            "namespaced"
        } else {
            "cluster-scoped"
        },
    );
    let (status_field, status_new, status_ser, status_crd, field_count) = match &attrs.status {
        Some(status) => (
            quote! {
                /// The observed state, written by the controller through the status
                /// subresource; `None` until it first writes one.
                #[serde(default)]
                pub status: ::core::option::Option<#status>,
            },
            quote!(status: ::core::option::Option::None,),
            quote! {
                match &self.status {
                    ::core::option::Option::Some(status) => {
                        #serde::ser::SerializeStruct::serialize_field(&mut state, "status", status)?;
                    }
                    ::core::option::Option::None => {
                        #serde::ser::SerializeStruct::skip_field(&mut state, "status")?;
                    }
                }
            },
            quote!(::core::option::Option::Some(#crd::structural_schema::<#status>())),
            quote!(4 + usize::from(self.status.is_some())),
        ),
        None => (
            quote!(),
            quote!(),
            quote!(),
            quote!(::core::option::Option::None),
            quote!(4),
        ),
    };
    let has_status = attrs.status.as_ref().map(|status| {
        let trait_ = quote!(#krate::runtime::status::HasStatus);
        quote! {
            impl #trait_ for #kind_ident {
                type Status = #status;

                fn status(&self) -> ::core::option::Option<&#status> {
                    self.status.as_ref()
                }

                fn status_mut(&mut self) -> &mut ::core::option::Option<#status> {
                    &mut self.status
                }
            }
        }
    });

    let short_names = &attrs.short_names;
    let categories = &attrs.categories;
    let columns = attrs.columns.iter().map(|c| {
        let Column {
            name,
            column_type,
            json_path,
            description,
            format,
            priority,
        } = c;
        let description = option_str(description.as_deref());
        let format = option_str(format.as_deref());
        quote! {
            #crd::PrinterColumn {
                name: #name,
                column_type: #column_type,
                json_path: #json_path,
                description: #description,
                format: #format,
                priority: #priority,
            }
        }
    });
    let namespaced = attrs.namespaced;
    let scale = scale_tokens(attrs.scale.as_ref(), &crd);

    Ok(quote! {
        #[doc = #doc]
        #[derive(::core::clone::Clone, ::core::fmt::Debug, #serde::Deserialize #(, #derives)*)]
        #[serde(crate = #serde_crate)]
        #vis struct #kind_ident {
            /// Standard object metadata: name, namespace, labels, owners, and the rest.
            #[serde(default)]
            pub metadata: #object_meta,
            /// The desired state.
            pub spec: #spec,
            #status_field
        }

        impl #kind_ident {
            #[doc = concat!("A `", #kind, "` named `name` with `spec`, no status and no other metadata.")]
            #vis fn new(name: &str, spec: #spec) -> Self {
                Self {
                    metadata: #object_meta {
                        name: ::core::option::Option::Some(::std::string::ToString::to_string(name)),
                        ..::core::default::Default::default()
                    },
                    spec,
                    #status_new
                }
            }
        }

        impl #serde::Serialize for #kind_ident {
            fn serialize<S: #serde::Serializer>(&self, serializer: S) -> ::core::result::Result<S::Ok, S::Error> {
                let mut state = #serde::Serializer::serialize_struct(serializer, #kind, #field_count)?;
                #serde::ser::SerializeStruct::serialize_field(&mut state, "apiVersion", #api_version)?;
                #serde::ser::SerializeStruct::serialize_field(&mut state, "kind", #kind)?;
                #serde::ser::SerializeStruct::serialize_field(&mut state, "metadata", &self.metadata)?;
                #serde::ser::SerializeStruct::serialize_field(&mut state, "spec", &self.spec)?;
                #status_ser
                #serde::ser::SerializeStruct::end(state)
            }
        }

        impl #k8s::Resource for #kind_ident {
            const API_VERSION: &'static str = #api_version;
            const GROUP: &'static str = #group;
            const KIND: &'static str = #kind;
            const VERSION: &'static str = #version;
            const URL_PATH_SEGMENT: &'static str = #plural;
            type Scope = #scope;
        }

        impl #k8s::ListableResource for #kind_ident {
            const LIST_KIND: &'static str = #list_kind;
        }

        impl #k8s::Metadata for #kind_ident {
            type Ty = #object_meta;

            fn metadata(&self) -> &#object_meta {
                &self.metadata
            }

            fn metadata_mut(&mut self) -> &mut #object_meta {
                &mut self.metadata
            }
        }

        impl #crd::CustomResource for #kind_ident {
            type Spec = #spec;

            const INFO: #crd::KindInfo = #crd::KindInfo {
                group: #group,
                version: #version,
                kind: #kind,
                plural: #plural,
                singular: #singular,
                namespaced: #namespaced,
                short_names: &[#(#short_names),*],
                categories: &[#(#categories),*],
                printer_columns: &[#(#columns),*],
                scale: #scale,
            };

            fn crd() -> #k8s::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
                <Self as #crd::CustomResource>::INFO.crd(
                    #crd::structural_schema::<#spec>(),
                    #status_crd,
                )
            }

            fn spec(&self) -> &#spec {
                &self.spec
            }

            fn spec_mut(&mut self) -> &mut #spec {
                &mut self.spec
            }
        }

        #has_status
    })
}

fn option_str(value: Option<&str>) -> TokenStream2 {
    match value {
        Some(value) => quote!(::core::option::Option::Some(#value)),
        None => quote!(::core::option::Option::None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_pluralize_as_kubernetes_tooling_does() {
        assert_eq!(pluralize("memcached"), "memcacheds");
        assert_eq!(pluralize("policy"), "policies");
        assert_eq!(pluralize("gateway"), "gateways");
        assert_eq!(pluralize("ingress"), "ingresses");
        assert_eq!(pluralize("box"), "boxes");
        assert_eq!(pluralize("patch"), "patches");
    }

    #[test]
    fn dns_labels_are_lowercase_alphanumerics_and_inner_dashes() {
        assert!(is_dns_label("cache"));
        assert!(is_dns_label("v1alpha1"));
        assert!(is_dns_label("a-b"));
        assert!(!is_dns_label(""));
        assert!(!is_dns_label("-a"));
        assert!(!is_dns_label("a-"));
        assert!(!is_dns_label("Cache"));
        assert!(!is_dns_label("a_b"));
        assert!(!is_dns_label(&"a".repeat(64)));
    }

    fn expand_str(source: &str) -> Result<String, String> {
        let input: DeriveInput = syn::parse_str(source).unwrap();
        expand(&input)
            .map(|t| t.to_string())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn bad_attributes_are_compile_errors_that_say_what_is_wrong() {
        let cases = [
            (
                r#"#[resource(version = "v1", kind = "A")] struct S;"#,
                "needs group",
            ),
            (
                r#"#[resource(group = "example", version = "v1", kind = "A")] struct S;"#,
                "at least one dot",
            ),
            (
                r#"#[resource(group = "a.b", version = "V1", kind = "A")] struct S;"#,
                "lowercase DNS label",
            ),
            (
                r#"#[resource(group = "a.b", version = "v1", kind = "lower")] struct S;"#,
                "uppercase",
            ),
            (
                r#"#[resource(group = "a.b", version = "v1", kind = "A", scope = "x")] struct S;"#,
                "unknown attribute",
            ),
            (
                r#"#[resource(group = "a.b", version = "v1", kind = "A", printcolumn(name = "X", type = "int", json_path = ".a"))] struct S;"#,
                "integer, number",
            ),
            (
                r#"#[resource(group = "a.b", version = "v1", kind = "A", printcolumn(name = "X", type = "string"))] struct S;"#,
                "needs json_path",
            ),
            (
                r#"#[resource(group = "a.b", version = "v1", kind = "A", shortname = "X")] struct S;"#,
                "DNS label",
            ),
            (
                r#"#[resource(group = "a.b", group = "c.d", version = "v1", kind = "A")] struct S;"#,
                "given twice",
            ),
            (r#"struct S;"#, "needs #[resource"),
            (
                r#"#[resource(group = "a.b", version = "v1", kind = "A", scale(spec_replicas_path = ".status.n", status_replicas_path = ".status.n"))] struct S;"#,
                "\".status.n\" is not a JSON path of fields under .spec",
            ),
            (
                r#"#[resource(group = "a.b", version = "v1", kind = "A", scale(spec_replicas_path = ".spec.n", status_replicas_path = ".status.pods[0]"))] struct S;"#,
                "under .status (no array index)",
            ),
            (
                r#"#[resource(group = "a.b", version = "v1", kind = "A", scale(spec_replicas_path = ".spec.n", status_replicas_path = ".status.n", label_selector_path = ".metadata.labels"))] struct S;"#,
                "under .status or .spec",
            ),
            (
                r#"#[resource(group = "a.b", version = "v1", kind = "A", scale(spec_replicas_path = ".spec.n"))] struct S;"#,
                "scale needs status_replicas_path",
            ),
            (
                r#"#[resource(group = "a.b", version = "v1", kind = "A", scale(replicas = ".spec.n"))] struct S;"#,
                "unknown scale attribute",
            ),
            (
                r#"#[resource(group = "a.b", version = "v1", kind = "A")] struct S<T>(T);"#,
                "generic",
            ),
        ];
        for (source, expected) in cases {
            let err = expand_str(source).expect_err(source);
            assert!(err.contains(expected), "{source}: {err}");
        }
    }

    #[test]
    fn the_scale_attribute_fills_the_kinds_scale() {
        let scaled = expand_str(
            r#"#[resource(group = "a.example.com", version = "v1", kind = "Pool", crate = "crate",
                          scale(spec_replicas_path = ".spec.size",
                                status_replicas_path = ".status.readyReplicas",
                                label_selector_path = ".status.selector"))] pub struct PoolSpec;"#,
        )
        .unwrap();
        assert!(
            scaled.contains(
                r#"scale : :: core :: option :: Option :: Some (crate :: runtime :: crd :: Scale { spec_replicas_path : ".spec.size" , status_replicas_path : ".status.readyReplicas" , label_selector_path : :: core :: option :: Option :: Some (".status.selector") , })"#
            ),
            "{scaled}"
        );
        let unscaled = expand_str(
            r#"#[resource(group = "a.example.com", version = "v1", kind = "Pool")] pub struct PoolSpec;"#,
        )
        .unwrap();
        assert!(
            unscaled.contains("scale : :: core :: option :: Option :: None"),
            "{unscaled}"
        );
    }

    #[test]
    fn generated_names_follow_the_attributes() {
        let out = expand_str(
            r#"#[resource(group = "a.example.com", version = "v1", kind = "Policy", namespaced,
                          crate = "crate")] pub struct PolicySpec;"#,
        )
        .unwrap();
        assert!(
            out.contains(r#"URL_PATH_SEGMENT : & 'static str = "policies""#),
            "{out}"
        );
        assert!(
            out.contains(r#"LIST_KIND : & 'static str = "PolicyList""#),
            "{out}"
        );
        assert!(out.contains("NamespaceResourceScope"), "{out}");
        assert!(
            out.contains(r#"serde (crate = "crate::runtime::crd::__private::serde")"#),
            "{out}"
        );
    }
}
