pub mod audit;
pub mod replay;
