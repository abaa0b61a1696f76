/*
 * Constant memory: y[i] = sum over k < degree + 1 of gm_poly_coeffs[k] *
 * x[i]^k, with the coefficients in a constant array filled from the host
 * (gm_module_set_constant(module, "gm_poly_coeffs", ...), Numba's
 * const.array_like). degree <= 15.
 */
#include <gpumem/kernel.h>

#define GM_POLY_MAX_COEFFS 16

GM_CONSTANT_ARRAY(float, gm_poly_coeffs, GM_POLY_MAX_COEFFS);

GM_KERNEL(poly_eval_f32, (const float *GM_RESTRICT, x), (float *GM_RESTRICT, y), (int64_t, n),
          (int32_t, degree))
{
    int64_t i = gm_global_id_x();
    float acc = 0.0f;

    if (i >= n)
        return;
    if (degree > GM_POLY_MAX_COEFFS - 1)
        degree = GM_POLY_MAX_COEFFS - 1;
    for (int32_t k = degree; k >= 0; k--)
        acc = acc * x[i] + gm_poly_coeffs[k];
    y[i] = acc;
}

GM_HOST_TABLE(gm__kernels_poly_const, GM_HOST_KERNELS(poly_eval_f32),
              GM_HOST_GLOBALS(gm_poly_coeffs));
