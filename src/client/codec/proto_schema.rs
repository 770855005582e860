//! The shape of the built-in kinds' protobuf messages, as the transcoder into JSON reads them:
//! the types here, and the tables generated from k8s.io/api in
//! [`proto_tables`](super::proto_tables).

/// One protobuf message: a Go struct of k8s.io/api or k8s.io/apimachinery.
#[derive(Debug)]
pub(crate) struct Message {
    /// The Go type, `k8s.io/api/core/v1.ConfigMap`: for error messages.
    pub name: &'static str,
    /// How the message as a whole becomes JSON.
    pub form: Form,
    /// The fields that have a protobuf number, in Go declaration order (the order
    /// `encoding/json` writes them). Empty for every form but [`Form::Struct`].
    pub fields: &'static [FieldDef],
}

/// How a message becomes JSON. Every form but `Struct` is a type of k8s.io/apimachinery
/// whose JSON form is not its protobuf fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// A JSON object of the fields.
    Struct,
    /// `metav1.Time` (`1: int64 seconds, 2: int32 nanos`): RFC 3339 in UTC to the second;
    /// `null` when empty.
    Time,
    /// `metav1.MicroTime` (as `Time`): RFC 3339 in UTC with six fractional digits.
    MicroTime,
    /// `resource.Quantity` (`1: string string`): that string.
    Quantity,
    /// `intstr.IntOrString` (`1: int64 type, 2: int32 intVal, 3: string strVal`): a number
    /// for type 0, a string for type 1.
    IntOrString,
    /// `runtime.RawExtension` (`1: bytes raw`): the raw bytes, which are JSON; `null` when
    /// empty.
    RawExtension,
    /// `metav1.FieldsV1` (`1: bytes Raw`): the raw bytes, which are JSON.
    FieldsV1,
    /// A named Go slice sent as a message (`1: repeated items`), such as
    /// `authenticationv1.ExtraValue`: a JSON array of the items.
    List(Type),
}

/// One field of a [`Form::Struct`] message.
#[derive(Debug)]
pub(crate) struct FieldDef {
    /// The protobuf field number.
    pub number: u32,
    /// The JSON member name; empty for an inline field (`json:",inline"`), whose message's
    /// fields are written into this object.
    pub json: &'static str,
    /// The type of the value, or of each element, or of each map value.
    pub ty: Type,
    /// Single, repeated, or a map.
    pub card: Card,
    /// `json:",omitempty"` on a scalar field that is not a pointer: its zero (`""`, `0`,
    /// `false`, empty bytes) is left out, as `encoding/json` leaves it out. Protobuf writes
    /// such fields always, and a pointer field only when it is set, so a pointer's zero is
    /// kept. Also `json:",omitzero"` on a message field that is not a pointer
    /// (`metadata.creationTimestamp`): its zero is an empty message.
    pub omit_zero: bool,
}

/// How many values a field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Card {
    /// One value (`opt`).
    Single,
    /// A JSON array (`rep`): one protobuf entry per element, or one packed entry for
    /// numbers.
    Repeated,
    /// A JSON object: entries are messages `{1: key, 2: value}`; the key is this type (a
    /// string type in every built-in kind), the value [`FieldDef::ty`].
    Map(Type),
}

/// The type of one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Type {
    /// UTF-8 text (Go `string` and named string types).
    String,
    /// Go `[]byte`: base64 in JSON.
    Bytes,
    /// `bool` (varint).
    Bool,
    /// `int32` (varint, negative values sign-extended to 64 bits).
    Int32,
    /// `int64` (varint).
    Int64,
    /// An embedded message: an index into [`MESSAGES`](super::proto_tables::MESSAGES).
    Message(u16),
}

/// A kind the apiserver serves as protobuf, and its message.
#[derive(Debug)]
pub(crate) struct Kind {
    /// The API group; empty for the core group.
    pub group: &'static str,
    /// The version, `v1`.
    pub version: &'static str,
    /// The kind, `ConfigMap`.
    pub kind: &'static str,
    /// Its message: an index into [`MESSAGES`](super::proto_tables::MESSAGES).
    pub message: u16,
}
