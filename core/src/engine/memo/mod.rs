//! The decision memo (off by default): a repeated period of mallocs and frees answered from a
//! recording of it.

pub(crate) mod decision_memo;
pub(crate) mod recall;
