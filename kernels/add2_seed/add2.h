void launch_add2(float *c,
                 const float *a,
                 const float *b,
                 int n);
