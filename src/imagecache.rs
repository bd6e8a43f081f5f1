//! What `/image/{schematic}/{version}/{asset}` means: key validation, the
//! factory's upstream rules, the store key layout for artifacts.
