/* Internal to src/model/: what the model file's reader (model_file.c), its
 * checks (model_file_check.c) and its writer (model_file_write.c) share;
 * the helpers are in model_file_hdf5.c. Public: meshinfer/model_file.h. */
#ifndef MESHINFER_MODEL_FILE_INTERNAL_H
#define MESHINFER_MODEL_FILE_INTERNAL_H

#include <hdf5.h>
#include <stddef.h>

#include "meshinfer/config.h"
#include "meshinfer/model_file.h"

struct mi_model_file {
    hid_t file;
    mi_config cfg;
    char path[4096];
};

/* Once per process: no HDF5 clean-up at exit and no printed error stacks
 * (we report one line). */
void mf_quiet_hdf5(void);

/* 1 if attribute a holds exactly one element. */
int mf_attr_is_single(hid_t a);
/* 1 if type t is an integer or IEEE-like float of at most 8 bytes whose
 * fields lie inside it: a corrupt file's type must not reach HDF5's
 * conversions (libhdf5 1.10 reads out of bounds converting one). */
int mf_type_is_number(hid_t t);
/* 1 if attribute a holds exactly n elements of such a type. */
int mf_attr_is_number(hid_t a, int n);
/* The n (<= 8) elements of attribute a into v, each a whole number (an
 * integer type, or a float type holding integers); 0, -1 when unreadable
 * (another count of elements, or not mf_type_is_number),
 * -2 when an element is not a whole number. */
int mf_attr_read_whole(hid_t a, long long *v, int n);

/* A single-valued int or float attribute; 0, or -1 with err (naming path). */
int mf_read_int_attr(hid_t loc, const char *name, int *v, const char *path, char *err);
int mf_read_float_attr(hid_t loc, const char *name, float *v, const char *path, char *err);

/* A string attribute of up to n-1 bytes into buf; 0 if present. */
int mf_read_str_attr(hid_t loc, const char *name, char *buf, size_t n);

/* Dataset `name` exists with rank and dims d0 (, d1); want_class
 * H5T_NATIVE_FLOAT asks for float32, H5T_NATIVE_UCHAR for 8-bit integers,
 * 0 for any type. Returns 0 or -1 with err. */
int mf_check_dataset(hid_t file, const char *name, int rank, hsize_t d0, hsize_t d1, hid_t want_class,
                     const char *path, char *err);

/* Version 4 (a language model of any family, model_file.h): the family's
 * traits as root attributes, each an int (i != NULL) or a float (f). */
typedef struct {
    const char *name;
    int *i;
    float *f;
    unsigned char *u;
} mf_trait;
#define MF_N_TRAITS 14
void mf_traits(mi_config *c, mf_trait t[MF_N_TRAITS]);
/* 1 when c needs version 4 (a family other than Llama, or traits other
 * than Llama's defaults). */
int mf_needs_traits(const mi_config *c);

/* A mixture of experts' sizes (config.h), root attributes of version 4
 * written only for the MoE families, which need them. */
typedef struct {
    const char *name;
    int *v;
} mf_moe_attr;
#define MF_N_MOE_ATTRS 3
void mf_moe_attrs(mi_config *c, mf_moe_attr a[MF_N_MOE_ATTRS]);

/* Every tensor of mf->cfg's family with its shape, recording each weight
 * matrix's dtype in mf->cfg. Returns 0 or -1 with err. */
int mf_check_all_tensors(mi_model_file *mf, char *err);

#endif
