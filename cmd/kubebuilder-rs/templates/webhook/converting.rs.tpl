/// Adds the {{kind}} conversions to the conversion webhook: each other version to and from
/// the storage version, {{hub}} (use `TryFrom` instead of `From` where a conversion can fail).
pub fn converting(
    conversion: controller_runtime::runtime::conversion::Conversion,
) -> controller_runtime::runtime::conversion::Conversion {
    conversion{{spokes}}
}

