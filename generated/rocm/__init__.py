"""Generated model packages for the rocm target (one per spec in specs/). Do not edit."""
