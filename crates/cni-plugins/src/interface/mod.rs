//! Interface plugins: they create or configure the container's interface.
