{
    (%0) = "pd_op.data" () {dtype:float32,name:"x",shape:[4,6]} : () -> tensor<4x6xf32>
    (%1) = "pd_op.data" () {dtype:int64,name:"ids",shape:[3]} : () -> tensor<3xi64>
    (%2) = "builtin.parameter" () {parameter_name:"table"} : () -> tensor<5x6xf32>
    (%17) = "builtin.parameter" () {parameter_name:"gamma"} : () -> tensor<6xf32>
    (%3) = "pd_op.full_int_array" () {dtype:int64,value:[1]} : () -> tensor<1xi64>
    (%4) = "pd_op.full_int_array" () {dtype:int64,value:[3]} : () -> tensor<1xi64>
    (%5) = "pd_op.slice" (%0, %3, %4) {axes:[0],decrease_axis:[],infer_flags:[1]} : (tensor<4x6xf32>, tensor<1xi64>, tensor<1xi64>) -> tensor<2x6xf32>
    (%6) = "pd_op.full_int_array" () {dtype:int64,value:[2,-1]} : () -> tensor<2xi64>
    (%7) = "pd_op.full" () {dtype:int32,shape:[1],value:1} : () -> tensor<1xi32>
    (%8) = "pd_op.split" (%0, %6, %7) {} : (tensor<4x6xf32>, tensor<2xi64>, tensor<1xi32>) -> vec[tensor<4x2xf32>,tensor<4x4xf32>]
    (%9, %10) = "builtin.split" (%8) {} : (vec[tensor<4x2xf32>,tensor<4x4xf32>]) -> tensor<4x2xf32>, tensor<4x4xf32>
    (%11) = "pd_op.embedding" (%1, %2) {padding_idx:0} : (tensor<3xi64>, tensor<5x6xf32>) -> tensor<3x6xf32>
    (%12) = "pd_op.full" () {dtype:float32,shape:[1],value:0} : () -> tensor<1xf32>
    (%13) = "pd_op.greater_than" (%0, %12) {} : (tensor<4x6xf32>, tensor<1xf32>) -> tensor<4x6xb>
    (%14) = "pd_op.swiglu" (%0, <<NULL VALUE>>) {} : (tensor<4x6xf32>, <<NULL TYPE>>) -> tensor<4x3xf32>
    (%15) = "pd_op.full" () {dtype:float32,shape:[1],value:1e-06} : () -> tensor<1xf32>
    (%16) = "pd_op.rms_norm" (%0, <<NULL VALUE>>, <<NULL VALUE>>, %17, <<NULL VALUE>>) {begin_norm_axis:1,epsilon:1e-06,quant_max_bound:0,quant_min_bound:0,quant_round_type:0,quant_scale:-1} : (tensor<4x6xf32>, <<NULL TYPE>>, <<NULL TYPE>>, tensor<6xf32>, <<NULL TYPE>>) -> tensor<4x6xf32>, tensor<4x6xf32>, tensor<4xf32>
    (%18) = "pd_op.full" () {dtype:int64,shape:[1],value:0} : () -> tensor<1xi64>
    (%19) = "pd_op.full" () {dtype:int64,shape:[1],value:10} : () -> tensor<1xi64>
    (%20) = "pd_op.full" () {dtype:int64,shape:[1],value:3} : () -> tensor<1xi64>
    (%21) = "pd_op.arange" (%18, %19, %20) {dtype:int64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4xi64>
}
