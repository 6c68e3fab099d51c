pub mod dataset;
pub mod simulate;
pub mod worlds;
